#!/usr/bin/python3
"""MQTT 5.0 interoperability scenarios against one raftmq process, with Python paho-mqtt 1.6.

Usage: paho_v5.py PORT MAX_KEEPALIVE_S [SCENARIO ...]

The broker must run with --max-keepalive MAX_KEEPALIVE_S and an ACL that denies pv5/denied/# and
grants everything else (test/paho-v5-interop.test.ts starts it so). Each scenario is one function
and prints one JSON line {"name", "ok", "detail"}. Every wait is bounded; a scenario that checks
that something does NOT happen waits a fixed window, which can only make it pass wrongly on a slow
machine, never fail wrongly.

paho-mqtt 1.6 reports neither PUBACK/PUBREC reason codes nor lets a subscriber hold its acks, and
it does not resolve topic aliases of incoming PUBLISH packets: RecordingClient below reads the
reason codes from the packet paho has just parsed and holds PUBACKs when asked, and Peer resolves
aliases as an application on paho 1.6 has to.
"""
import json
import struct
import sys
import threading
import time
import traceback

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCodes
from paho.mqtt.subscribeoptions import SubscribeOptions

HOST = "127.0.0.1"
PORT = int(sys.argv[1])
MAX_KEEPALIVE_S = int(sys.argv[2])
WAIT_S = 10.0

# Reason codes (MQTT 5.0 section 2.4).
SUCCESS = 0x00
NO_MATCHING_SUBSCRIBERS = 0x10
NO_SUBSCRIPTION_EXISTED = 0x11
NOT_AUTHORIZED = 0x87
PROTOCOL_ERROR = 0x82
TOPIC_FILTER_INVALID = 0x8F
PAYLOAD_FORMAT_INVALID = 0x99


class Fail(Exception):
    pass


def check(cond, detail):
    if not cond:
        raise Fail(detail)


def props(packet_type, **values):
    p = Properties(packet_type)
    for k, v in values.items():
        setattr(p, k, v)
    return p


def prop(p, name, default=None):
    return getattr(p, name, default) if p is not None else default


class RecordingClient(mqtt.Client):
    """paho 1.6 Client that records the reason code of every PUBACK, PUBREC and PUBCOMP and can
    hold the PUBACKs it owes (to see the broker respect its Receive Maximum)."""

    def __init__(self, peer, client_id):
        super().__init__(client_id=client_id, protocol=mqtt.MQTTv5, reconnect_on_failure=False)
        self.peer = peer
        self.hold_pubacks = False
        self.held = []

    def _record_ack(self, kind):
        packet = self._in_packet["packet"]
        (mid,) = struct.unpack("!H", packet[:2])
        code = packet[2] if len(packet) > 2 else SUCCESS
        with self.peer.cond:
            self.peer.acks.append((kind, mid, code))
            self.peer.cond.notify_all()

    def _handle_pubackcomp(self, cmd):
        self._record_ack(cmd)
        return super()._handle_pubackcomp(cmd)

    def _handle_pubrec(self):
        self._record_ack("PUBREC")
        return super()._handle_pubrec()

    def _send_puback(self, mid):
        if self.hold_pubacks:
            self.held.append(mid)
            return mqtt.MQTT_ERR_SUCCESS
        return super()._send_puback(mid)

    def release_one(self):
        mid = self.held.pop(0)
        return super()._send_puback(mid)


OPEN = []


class Peer:
    """One paho client, its network thread, and everything it received."""

    def __init__(self, client_id):
        self.client_id = client_id
        self.cond = threading.Condition()
        self.msgs = []
        self.acks = []
        self.connack = None
        self.subacks = {}
        self.unsubacks = {}
        self.completed = set()
        self.disconnected = None
        self.aliases = {}
        self.c = RecordingClient(self, client_id)
        self.c.on_connect = self._on_connect
        self.c.on_message = self._on_message
        self.c.on_subscribe = self._on_subscribe
        self.c.on_unsubscribe = self._on_unsubscribe
        self.c.on_publish = self._on_publish
        self.c.on_disconnect = self._on_disconnect
        OPEN.append(self)

    # callbacks, on paho's network thread
    def _on_connect(self, c, u, flags, rc, properties):
        with self.cond:
            self.connack = (rc.value, flags.get("session present", 0), properties)
            self.cond.notify_all()

    def _on_message(self, c, u, m):
        alias = prop(m.properties, "TopicAlias")
        wire_topic = topic = m.topic  # paho 1.6 decodes it to str
        if alias is not None:
            if topic:
                self.aliases[alias] = topic
            else:
                topic = self.aliases.get(alias, "<unknown alias %d>" % alias)
        with self.cond:
            self.msgs.append({
                "topic": topic, "wire_topic": wire_topic, "payload": m.payload, "qos": m.qos,
                "retain": m.retain, "dup": m.dup, "props": m.properties,
            })
            self.cond.notify_all()

    def _on_subscribe(self, c, u, mid, codes, properties):
        with self.cond:
            self.subacks[mid] = [rc.value for rc in codes]
            self.cond.notify_all()

    def _on_unsubscribe(self, c, u, mid, properties, codes):
        codes = codes if isinstance(codes, list) else [codes]
        with self.cond:
            self.unsubacks[mid] = [rc.value for rc in codes]
            self.cond.notify_all()

    def _on_publish(self, c, u, mid):
        with self.cond:
            self.completed.add(mid)
            self.cond.notify_all()

    def _on_disconnect(self, c, u, rc, properties=None):
        with self.cond:
            self.disconnected = rc.value if isinstance(rc, ReasonCodes) else rc
            self.cond.notify_all()

    # actions, on the scenario's thread
    def wait(self, pred, what, timeout=WAIT_S):
        with self.cond:
            if not self.cond.wait_for(pred, timeout):
                raise Fail("%s: timed out after %.0f s waiting for %s" % (self.client_id, timeout, what))

    def stays(self, pred, window_s):
        """True when pred stays false for window_s (a check that something does not happen)."""
        with self.cond:
            return not self.cond.wait_for(pred, window_s)

    def connect(self, clean_start=True, keepalive=30, **connect_props):
        p = props(PacketTypes.CONNECT, **connect_props) if connect_props else None
        self.c.connect(HOST, PORT, keepalive=keepalive, clean_start=clean_start, properties=p)
        self.c.loop_start()
        self.wait(lambda: self.connack is not None, "CONNACK")
        return self.connack

    def subscribe(self, topic, qos=1, options=None, **sub_props):
        """SUBSCRIBE one filter or a list of (filter, SubscribeOptions); returns the SUBACK codes."""
        p = props(PacketTypes.SUBSCRIBE, **sub_props) if sub_props else None
        if isinstance(topic, list):
            rc, mid = self.c.subscribe(topic, properties=p)
        else:
            rc, mid = self.c.subscribe(topic, options=options or SubscribeOptions(qos=qos), properties=p)
        check(rc == mqtt.MQTT_ERR_SUCCESS, "subscribe not sent: %d" % rc)
        self.wait(lambda: mid in self.subacks, "SUBACK")
        return self.subacks[mid]

    def unsubscribe(self, topics, **unsub_props):
        p = props(PacketTypes.UNSUBSCRIBE, **unsub_props) if unsub_props else None
        rc, mid = self.c.unsubscribe(topics, properties=p)
        check(rc == mqtt.MQTT_ERR_SUCCESS, "unsubscribe not sent: %d" % rc)
        self.wait(lambda: mid in self.unsubacks, "UNSUBACK")
        return self.unsubacks[mid]

    def publish(self, topic, payload, qos=1, retain=False, **pub_props):
        """PUBLISH and wait for its flow; returns the PUBACK or PUBREC reason code (None at QoS 0)."""
        p = props(PacketTypes.PUBLISH, **pub_props) if pub_props else None
        info = self.c.publish(topic, payload, qos=qos, retain=retain, properties=p)
        check(info.rc == mqtt.MQTT_ERR_SUCCESS, "publish not sent: %d" % info.rc)
        if qos == 0:
            self.wait(lambda: info.mid in self.completed, "the QoS 0 PUBLISH to be written")
            return None
        kind = "PUBACK" if qos == 1 else "PUBREC"
        self.wait(lambda: any(a[0] == kind and a[1] == info.mid for a in self.acks), kind)
        code = [a[2] for a in self.acks if a[0] == kind and a[1] == info.mid][-1]
        if qos == 2 and code < 0x80:
            self.wait(lambda: info.mid in self.completed, "PUBCOMP")
        return code

    def payloads(self):
        with self.cond:
            return [m["payload"] for m in self.msgs]

    def wait_payload(self, payload, what=None):
        self.wait(lambda: any(m["payload"] == payload for m in self.msgs), what or repr(payload))
        return [m for m in self.msgs if m["payload"] == payload][0]

    def disconnect(self, reason=0, **disc_props):
        p = props(PacketTypes.DISCONNECT, **disc_props) if disc_props else None
        self.c.disconnect(reasoncode=ReasonCodes(PacketTypes.DISCONNECT, identifier=reason), properties=p)
        self.wait(lambda: self.disconnected is not None, "the DISCONNECT to be written")
        self.c.loop_stop()

    def go_silent(self):
        """Stops paho's network thread without a DISCONNECT: no PINGREQ, the socket stays open."""
        self.c.loop_stop()

    def drop(self):
        """Closes the socket without a DISCONNECT, as a crashed client would."""
        self.c.loop_stop()
        self.c.socket().close()

    def close(self):
        try:
            if self.disconnected is None and self.c.socket() is not None and self.c.socket().fileno() >= 0:
                self.c.disconnect()
            self.c.loop_stop()
        except Exception:
            pass


def fence(sub, pub, topic):
    """Publishes a marker after everything the check is about; once the subscriber has it, the
    broker has delivered all it was going to deliver before it (one connection's messages keep
    their order). QoS 2, because paho hands a QoS 2 message to on_message only at its PUBREL: a
    QoS 1 marker could overtake an earlier QoS 2 message there."""
    marker = ("fence-%f" % time.monotonic()).encode()
    pub.publish(topic, marker, qos=2)
    sub.wait_payload(marker, "the fence message on " + topic)
    with sub.cond:
        return [m for m in sub.msgs if m["payload"] != marker]


# ---- scenarios ------------------------------------------------------------------------------

def scenario_qos_round_trip():
    t = "pv5/basic/"
    sub = Peer("pv5-basic-sub")
    rc, present, _ = sub.connect()
    check(rc == SUCCESS and present == 0, "CONNACK %s session present %s" % (rc, present))
    check(sub.subscribe(t + "x", qos=2) == [2], "SUBACK for QoS 2 not granted 2")
    pub = Peer("pv5-basic-pub")
    pub.connect()
    codes = [pub.publish(t + "x", ("q%d" % q).encode(), qos=q) for q in (0, 1, 2)]
    check(codes == [None, SUCCESS, SUCCESS], "PUBACK/PUBREC codes %r, want [None, 0, 0]" % codes)
    sub.wait(lambda: len(sub.msgs) == 3, "three messages")
    got = [(m["payload"], m["qos"]) for m in sub.msgs]
    check(got == [(b"q0", 0), (b"q1", 1), (b"q2", 2)], "received %r" % got)
    nobody = [pub.publish(t + "nobody", b"n", qos=q) for q in (1, 2)]
    check(nobody == [NO_MATCHING_SUBSCRIBERS] * 2, "publish without subscriber: %r, want 0x10 twice" % nobody)
    return "QoS 0/1/2 delivered at their QoS; PUBACK/PUBREC 0x00, and 0x10 with no subscriber"


def scenario_retained_user_properties():
    t = "pv5/retained/"
    user = [("k", "1"), ("b", "2"), ("k", "3")]
    pub = Peer("pv5-ret-pub")
    pub.connect()
    for q in (0, 1, 2):
        pub.publish(t + "r%d" % q, ("ret%d" % q).encode(), qos=q, retain=True, UserProperty=user)
    sub = Peer("pv5-ret-sub2")
    sub.connect()
    sub.subscribe(t + "+", qos=2)
    sub.wait(lambda: len(sub.msgs) == 3, "three retained messages")
    for m in sub.msgs:
        q = int(m["payload"][-1:])
        check(m["retain"] == 1, "%r arrived without the retain flag" % m["payload"])
        check(m["qos"] == q, "%r arrived at QoS %d, published %d" % (m["payload"], m["qos"], q))
        got = prop(m["props"], "UserProperty")
        check(got == user, "%r user properties %r, want %r" % (m["payload"], got, user))
    low = Peer("pv5-ret-sub1")
    low.connect()
    low.subscribe(t + "+", qos=1)
    low.wait(lambda: len(low.msgs) == 3, "three retained messages at QoS 1")
    qos = sorted((m["payload"], m["qos"]) for m in low.msgs)
    check(qos == [(b"ret0", 0), (b"ret1", 1), (b"ret2", 1)], "retained QoS under a QoS 1 subscription: %r" % qos)
    for q in (0, 1, 2):
        pub.publish(t + "r%d" % q, b"", qos=1, retain=True)
    late = Peer("pv5-ret-late")
    late.connect()
    late.subscribe(t + "+", qos=2)
    rest = fence(late, pub, t + "fence")
    check(rest == [], "retained messages after clearing: %r" % [m["payload"] for m in rest])
    return "retained QoS 0/1/2 with user properties in order; granted QoS caps them; empty payload clears"


def scenario_will_on_keepalive_expiry():
    t = "pv5/will-ka/"
    user = [("why", "keepalive"), ("n", "1"), ("why", "again")]
    watch = Peer("pv5-willka-watch")
    watch.connect()
    watch.subscribe(t + "will", qos=1)
    w = Peer("pv5-willka")
    w.c.will_set(t + "will", b"gone", qos=1, properties=props(PacketTypes.WILLMESSAGE, UserProperty=user))
    w.connect(keepalive=1)
    w.go_silent()
    m = watch.wait_payload(b"gone", "the will after 1.5 x keep-alive of silence")
    got = prop(m["props"], "UserProperty")
    check(got == user, "will user properties %r, want %r" % (got, user))
    check(m["qos"] == 1 and m["topic"] == t + "will", "will %r at QoS %d" % (m["topic"], m["qos"]))
    w.drop()
    return "a silent client's will (user properties in order) published after keep-alive expiry"


def scenario_assigned_client_identifier():
    anon = Peer("")
    rc, _, p = anon.connect(SessionExpiryInterval=60)
    assigned = prop(p, "AssignedClientIdentifier")
    check(rc == SUCCESS and assigned, "CONNACK %s without an Assigned Client Identifier" % rc)
    anon.subscribe("pv5/assigned/x", qos=1)
    anon.disconnect()
    again = Peer(assigned)
    _, present, p2 = again.connect(clean_start=False, SessionExpiryInterval=0)
    check(present == 1, "reconnect with the assigned id %r: session present 0" % assigned)
    check(prop(p2, "AssignedClientIdentifier") is None, "an id was assigned to a client that gave one")
    again.disconnect()
    resume = Peer("")
    rc, present, p4 = resume.connect(clean_start=False)
    check(rc == SUCCESS and prop(p4, "AssignedClientIdentifier") and present == 0,
          "empty client id with Clean Start 0: CONNACK %s, present %s, assigned %r" % (rc, present, prop(p4, "AssignedClientIdentifier")))
    given = Peer("pv5-given-id")
    _, _, p3 = given.connect()
    check(prop(p3, "AssignedClientIdentifier") is None, "an id was assigned to a client that gave one")
    return "empty client id assigned %r, which resumes its session; also with Clean Start 0; a given id gets none" % assigned


def scenario_offline_queueing():
    t = "pv5/offline/"
    sub = Peer("pv5-offline-sub")
    sub.connect(SessionExpiryInterval=60)
    sub.subscribe(t + "#", qos=2)
    sub.disconnect()
    pub = Peer("pv5-offline-pub")
    pub.connect()
    for q in (0, 1, 2):
        pub.publish(t + "m", ("q%d" % q).encode(), qos=q)
    back = Peer("pv5-offline-sub")
    _, present, _ = back.connect(clean_start=False, SessionExpiryInterval=0)
    check(present == 1, "session not present after reconnecting within its expiry")
    rest = fence(back, pub, t + "fence")
    got = [(m["payload"], m["qos"]) for m in rest]
    check(got == [(b"q1", 1), (b"q2", 2)], "offline session received %r, want QoS 1 and 2 only" % got)
    return "QoS 1 and 2 queued for an offline session and delivered on resume; QoS 0 not queued (our choice)"


def scenario_overlapping_subscriptions():
    t = "pv5/overlap/"
    sub = Peer("pv5-overlap-sub")
    sub.connect()
    sub.subscribe(t + "#", qos=2, SubscriptionIdentifier=1)
    sub.subscribe(t + "+", qos=1, SubscriptionIdentifier=2)
    pub = Peer("pv5-overlap-pub")
    pub.connect()
    pub.publish(t + "a", b"both", qos=2)
    rest = fence(sub, pub, t + "fence")
    got = [(m["payload"], m["qos"], sorted(prop(m["props"], "SubscriptionIdentifier", []))) for m in rest]
    check(got == [(b"both", 2, [1, 2])], "received %r, want one message at QoS 2 with identifiers [1, 2]" % got)
    return "overlapping subscriptions: one message at the highest QoS carrying both Subscription Identifiers"


def scenario_subscribe_failure():
    t = "pv5/subfail/"
    sub = Peer("pv5-subfail")
    sub.connect()
    codes = sub.subscribe([
        (t + "ok", SubscribeOptions(qos=1)),
        ("pv5/denied/x", SubscribeOptions(qos=1)),
        ("$share//" + t + "x", SubscribeOptions(qos=1)),
    ])
    check(codes == [1, NOT_AUTHORIZED, TOPIC_FILTER_INVALID], "SUBACK %r, want [1, 0x87, 0x8f]" % [hex(c) for c in codes])
    check(sub.disconnected is None, "disconnected after a partly failed SUBSCRIBE")
    return "SUBACK per filter: granted, 0x87 for an ACL-denied filter, 0x8F for an empty share name"


def scenario_unsubscribe():
    t = "pv5/unsub/"
    sub = Peer("pv5-unsub")
    sub.connect()
    sub.subscribe(t + "a", qos=1)
    sub.subscribe(t + "fence", qos=1)
    codes = sub.unsubscribe([t + "a", t + "never"], UserProperty=[("a", "2"), ("c", "3")])
    check(codes == [SUCCESS, NO_SUBSCRIPTION_EXISTED], "UNSUBACK %r, want [0x00, 0x11]" % [hex(c) for c in codes])
    pub = Peer("pv5-unsub-pub")
    pub.connect()
    pub.publish(t + "a", b"after", qos=1)
    rest = fence(sub, pub, t + "fence")
    check(rest == [], "received after unsubscribing: %r" % [m["payload"] for m in rest])
    return "UNSUBACK (with user properties) 0x00 and 0x11 per filter; nothing delivered after unsubscribing"


def scenario_session_expiry():
    cid = "pv5-expiry"
    a = Peer(cid)
    a.connect(SessionExpiryInterval=1)
    a.subscribe("pv5/expiry/x", qos=1)
    a.disconnect()
    b = Peer(cid)
    _, present, _ = b.connect(clean_start=False, SessionExpiryInterval=1)
    check(present == 1, "session not present right after disconnecting (expiry 1 s)")
    b.disconnect()
    time.sleep(3)
    c = Peer(cid)
    _, present, _ = c.connect(clean_start=False, SessionExpiryInterval=0)
    check(present == 0, "session still present 3 s after disconnecting with a 1 s expiry")
    c.disconnect()
    # Session Expiry 0 at CONNECT: the session ends with the connection.
    d = Peer(cid)
    d.connect(SessionExpiryInterval=0)
    d.disconnect()
    e = Peer(cid)
    _, present, _ = e.connect(clean_start=False, SessionExpiryInterval=1)
    check(present == 0, "session present after a connection with Session Expiry 0")
    # DISCONNECT raises the interval (1 s to 5 s): still present 2 s later; DISCONNECT 0 ends it.
    e.subscribe("pv5/expiry/x", qos=1)
    e.disconnect(SessionExpiryInterval=5)
    time.sleep(2)
    f = Peer(cid)
    _, present, _ = f.connect(clean_start=False, SessionExpiryInterval=1)
    check(present == 1, "session gone 2 s after a DISCONNECT that set its expiry to 5 s")
    f.disconnect(SessionExpiryInterval=0)
    g = Peer(cid)
    _, present, _ = g.connect(clean_start=False)
    check(present == 0, "session present after a DISCONNECT with Session Expiry 0")
    return "expiry 1 s: present at once, gone after 3 s; expiry 0 ends with the connection; DISCONNECT raises it to 5 s and lowers it to 0"


def scenario_shared_round_robin():
    t = "pv5/shared/"
    pub = Peer("pv5-shared-pub")
    pub.connect()
    pub.publish(t + "t", b"retained", qos=1, retain=True)
    members = [Peer("pv5-shared-a"), Peer("pv5-shared-b")]
    for m in members:
        m.connect()
        check(m.subscribe("$share/g/" + t + "t", qos=1) == [1], "shared SUBACK not granted 1")
    sent = [("m%d" % i).encode() for i in range(10)]
    for p in sent:
        pub.publish(t + "t", p, qos=1)
    total = lambda: len(members[0].msgs) + len(members[1].msgs)  # noqa: E731
    members[0].wait(lambda: total() >= 10, "ten shared messages")
    got = [[m["payload"] for m in x.msgs] for x in members]
    check(sorted(got[0] + got[1]) == sorted(sent), "shared members got %r" % got)
    check(len(got[0]) == 5 and len(got[1]) == 5, "round robin split %d/%d, want 5/5" % (len(got[0]), len(got[1])))
    pub.publish(t + "t", b"", qos=1, retain=True)
    return "ten messages split 5/5 between two members, each once; no retained message on a shared subscribe"


def scenario_subscribe_options():
    t = "pv5/subopts/"
    pub = Peer("pv5-subopts-pub")
    pub.connect()
    # No Local
    nl = Peer("pv5-subopts-nl")
    nl.connect()
    nl.subscribe(t + "nl", options=SubscribeOptions(qos=1, noLocal=True))
    nl.publish(t + "nl", b"own", qos=1)
    rest = fence(nl, pub, t + "nl")
    check(rest == [], "No Local subscriber received its own %r" % [m["payload"] for m in rest])
    # Retain As Published
    rap = Peer("pv5-subopts-rap")
    rap.connect()
    rap.subscribe(t + "rap", options=SubscribeOptions(qos=1, retainAsPublished=True))
    plain = Peer("pv5-subopts-plain")
    plain.connect()
    plain.subscribe(t + "rap", options=SubscribeOptions(qos=1))
    pub.publish(t + "rap", b"live", qos=1, retain=True)
    check(rap.wait_payload(b"live")["retain"] == 1, "Retain As Published: live copy lost its retain flag")
    check(plain.wait_payload(b"live")["retain"] == 0, "without Retain As Published the live copy kept retain")
    pub.publish(t + "rap", b"", qos=1, retain=True)
    # Retain Handling
    pub.publish(t + "rh", b"kept", qos=1, retain=True)
    results = []
    for rh, resubscribe, want in ((0, True, 2), (1, True, 1), (2, False, 0)):
        s = Peer("pv5-subopts-rh%d" % rh)
        s.connect()
        s.subscribe(t + "rh", options=SubscribeOptions(qos=1, retainHandling=rh))
        if resubscribe:
            s.subscribe(t + "rh", options=SubscribeOptions(qos=1, retainHandling=rh))
        got = [m["payload"] for m in fence(s, pub, t + "rh")].count(b"kept")
        results.append(got)
        check(got == want, "Retain Handling %d: %d retained copies over %d SUBSCRIBEs, want %d" % (rh, got, 2 if resubscribe else 1, want))
    pub.publish(t + "rh", b"", qos=1, retain=True)
    return "No Local, Retain As Published, Retain Handling 0/1/2 (retained copies %r)" % results


def scenario_payload_format_and_content_type():
    t = "pv5/format/"
    sub = Peer("pv5-format-sub")
    sub.connect()
    sub.subscribe(t + "#", qos=1)
    pub = Peer("pv5-format-pub")
    pub.connect()
    code = pub.publish(t + "utf8", "h\u00e9llo".encode(), qos=1, PayloadFormatIndicator=1, ContentType="text/plain; charset=utf-8")
    check(code == SUCCESS, "PUBACK %r for valid UTF-8" % code)
    m = sub.wait_payload("h\u00e9llo".encode())
    got = (prop(m["props"], "PayloadFormatIndicator"), prop(m["props"], "ContentType"))
    check(got == (1, "text/plain; charset=utf-8"), "received format/content type %r" % (got,))
    bad = pub.publish(t + "bad", b"\xff\xfe", qos=1, PayloadFormatIndicator=1)
    check(bad == PAYLOAD_FORMAT_INVALID, "PUBACK %r for invalid UTF-8 under indicator 1, want 0x99" % bad)
    rest = fence(sub, pub, t + "fence")
    check([m["payload"] for m in rest] == ["h\u00e9llo".encode()], "invalid payload routed: %r" % rest)
    return "Payload Format Indicator and Content Type passed through; non-UTF-8 under indicator 1 gets 0x99"


def scenario_message_expiry():
    t = "pv5/expire/"
    cid = "pv5-expire-sub"
    sub = Peer(cid)
    sub.connect(SessionExpiryInterval=60)
    sub.subscribe(t + "q", qos=2)
    sub.disconnect()
    pub = Peer("pv5-expire-pub")
    pub.connect()
    pub.publish(t + "q", b"short", qos=1, MessageExpiryInterval=1)
    pub.publish(t + "q", b"short2", qos=2, MessageExpiryInterval=1)
    pub.publish(t + "q", b"long", qos=1, MessageExpiryInterval=60)
    pub.publish(t + "q", b"long2", qos=2, MessageExpiryInterval=60)
    pub.publish(t + "ret", b"ret-short", qos=1, retain=True, MessageExpiryInterval=1)
    published = time.monotonic()
    time.sleep(2.5)
    back = Peer(cid)
    back.connect(clean_start=False)
    rest = fence(back, pub, t + "q")
    elapsed = time.monotonic() - published
    got = [m["payload"] for m in rest]
    check(got == [b"long", b"long2"], "after 2.5 s offline received %r, want long and long2" % got)
    lefts = [prop(m["props"], "MessageExpiryInterval") for m in rest]
    check(all(x is not None and 1 <= x <= 60 - int(elapsed) for x in lefts), "arrived with %r s left after %.1f s" % (lefts, elapsed))
    left = lefts[0]
    late = Peer("pv5-expire-late")
    late.connect()
    late.subscribe(t + "ret", qos=1)
    rest = fence(late, pub, t + "ret")
    check(rest == [], "expired retained message sent: %r" % rest)
    return "expired QoS 1/2 messages not delivered (queued and retained); remaining expiry %d s after %.1f s" % (left, elapsed)


def scenario_subscription_identifiers():
    t = "pv5/subid/"
    sub = Peer("pv5-subid")
    sub.connect()
    sub.subscribe(t + "a/#", qos=1, SubscriptionIdentifier=11)
    sub.subscribe(t + "b", qos=1)
    pub = Peer("pv5-subid-pub")
    pub.connect()
    pub.publish(t + "a/x", b"one", qos=1)
    pub.publish(t + "b", b"none", qos=1)
    check(prop(sub.wait_payload(b"one")["props"], "SubscriptionIdentifier") == [11], "a/x lacks identifier 11")
    check(prop(sub.wait_payload(b"none")["props"], "SubscriptionIdentifier") is None, "identifier on a subscription without one")
    sub.subscribe(t + "a/#", qos=1, SubscriptionIdentifier=12)
    pub.publish(t + "a/y", b"two", qos=1)
    got = prop(sub.wait_payload(b"two")["props"], "SubscriptionIdentifier")
    check(got == [12], "after replacing the subscription identifiers are %r, want [12]" % got)
    return "Subscription Identifier on delivery, none without one, replaced with the subscription"


def scenario_request_response():
    t = "pv5/reqresp/"
    req = Peer("pv5-requester")
    _, _, p = req.connect(RequestResponseInformation=1)
    info = prop(p, "ResponseInformation")
    check(info, "no Response Information though requested")
    plain = Peer("pv5-no-request")
    _, _, p2 = plain.connect()
    check(prop(p2, "ResponseInformation") is None, "Response Information sent unrequested")
    resp = Peer("pv5-responder")
    resp.connect()
    resp.subscribe(t + "request", qos=1)
    reply_topic = info + "reply"
    req.subscribe(reply_topic, qos=1)
    req.publish(t + "request", b"ping", qos=1, ResponseTopic=reply_topic, CorrelationData=b"\x00corr\xff")
    m = resp.wait_payload(b"ping")
    rt, cd = prop(m["props"], "ResponseTopic"), prop(m["props"], "CorrelationData")
    check((rt, cd) == (reply_topic, b"\x00corr\xff"), "request arrived with %r" % ((rt, cd),))
    resp.publish(rt, b"pong", qos=1, CorrelationData=cd)
    r = req.wait_payload(b"pong")
    check(prop(r["props"], "CorrelationData") == b"\x00corr\xff", "response lost its correlation data")
    return "Response Information %r; response topic and correlation data round trip" % info


def scenario_server_topic_alias():
    t = "pv5/salias/"
    sub = Peer("pv5-salias-sub")
    _, _, _ = sub.connect(TopicAliasMaximum=2)
    sub.subscribe(t + "#", qos=1)
    noalias = Peer("pv5-salias-none")
    noalias.connect()
    noalias.subscribe(t + "#", qos=1)
    pub = Peer("pv5-salias-pub")
    pub.connect()
    order = ["t1", "t2", "t1", "t3", "t1", "t2", "t3", "t3"]
    for i, name in enumerate(order):
        pub.publish(t + name, ("%d" % i).encode(), qos=1)
    sub.wait(lambda: len(sub.msgs) == len(order), "%d messages" % len(order))
    got = [m["topic"] for m in sub.msgs]
    check(got == [t + n for n in order], "resolved topics %r" % got)
    aliases = [prop(m["props"], "TopicAlias") for m in sub.msgs]
    check(all(a is not None and 1 <= a <= 2 for a in aliases), "aliases %r outside 1..2" % aliases)
    check(any(m["wire_topic"] == "" for m in sub.msgs), "no PUBLISH reused an alias with an empty topic")
    noalias.wait(lambda: len(noalias.msgs) == len(order), "%d messages" % len(order))
    check(all(prop(m["props"], "TopicAlias") is None for m in noalias.msgs), "alias sent to a client allowing none")
    return "broker aliases within the client's maximum 2 (%r), resolved in order; none to a client allowing none" % aliases


def scenario_client_topic_alias():
    t = "pv5/calias/"
    sub = Peer("pv5-calias-sub")
    sub.connect()
    sub.subscribe(t + "#", qos=1)
    pub = Peer("pv5-calias-pub")
    _, _, p = pub.connect()
    maximum = prop(p, "TopicAliasMaximum", 0)
    check(maximum >= 1, "broker allows no inbound topic alias (%r)" % maximum)
    steps = [(t + "ca", b"one"), ("", b"two"), (t + "cb", b"three"), ("", b"four")]
    for topic, payload in steps:
        check(pub.publish(topic, payload, qos=1, TopicAlias=1) == SUCCESS, "PUBACK not 0 for %r" % payload)
    sub.wait(lambda: len(sub.msgs) == 4, "four messages")
    got = [(m["topic"], m["payload"]) for m in sub.msgs]
    want = [(t + "ca", b"one"), (t + "ca", b"two"), (t + "cb", b"three"), (t + "cb", b"four")]
    check(got == want, "received %r" % got)
    pub.disconnect()
    again = Peer("pv5-calias-pub")
    again.connect()
    again.c.publish("", b"stale", qos=1, properties=props(PacketTypes.PUBLISH, TopicAlias=1))
    again.wait(lambda: again.disconnected is not None, "DISCONNECT for an alias of the previous connection")
    check(again.disconnected == PROTOCOL_ERROR, "alias unknown on this connection: DISCONNECT %r, want 0x82" % again.disconnected)
    return "client topic alias set, used and remapped (broker maximum %d); aliases do not outlive the connection (0x82)" % maximum


def scenario_maximum_packet_size():
    t = "pv5/maxpkt/"
    sub = Peer("pv5-maxpkt-sub")
    sub.connect(MaximumPacketSize=200)
    sub.subscribe(t + "#", qos=1)
    pub = Peer("pv5-maxpkt-pub")
    pub.connect()
    pub.publish(t + "x", b"small1", qos=1)
    pub.publish(t + "x", b"B" * 1000, qos=1)
    pub.publish(t + "x", b"b" * 1000, qos=0)
    pub.publish(t + "x", b"small2", qos=1)
    rest = fence(sub, pub, t + "fence")
    got = [m["payload"] if len(m["payload"]) < 100 else len(m["payload"]) for m in rest]
    check(got == [b"small1", b"small2"], "client with Maximum Packet Size 200 received %r" % got)
    check(sub.disconnected is None, "client disconnected")
    return "PUBLISH larger than the client's Maximum Packet Size 200 dropped for it (QoS 0 and 1); connection kept"


def scenario_server_keep_alive():
    asks = Peer("pv5-ka-high")
    rc, _, p = asks.connect(keepalive=MAX_KEEPALIVE_S * 10)
    got = prop(p, "ServerKeepAlive")
    check(rc == SUCCESS and got == MAX_KEEPALIVE_S, "asked %d: Server Keep Alive %r, want %d" % (MAX_KEEPALIVE_S * 10, got, MAX_KEEPALIVE_S))
    within = Peer("pv5-ka-low")
    _, _, p2 = within.connect(keepalive=MAX_KEEPALIVE_S)
    check(prop(p2, "ServerKeepAlive") is None, "Server Keep Alive sent to a client within the maximum")
    return "keep-alive %d s answered with Server Keep Alive %d; none at %d s" % (MAX_KEEPALIVE_S * 10, got, MAX_KEEPALIVE_S)


def scenario_flow_control():
    t = "pv5/flow/"
    sub = Peer("pv5-flow-sub")
    sub.connect(ReceiveMaximum=2)
    sub.subscribe(t + "#", qos=1)
    sub.c.hold_pubacks = True
    pub = Peer("pv5-flow-pub")
    pub.connect()
    total = 6
    for i in range(total):
        pub.publish(t + "m", ("m%d" % i).encode(), qos=1)
    sub.wait(lambda: len(sub.msgs) >= 2, "the first two messages")
    check(sub.stays(lambda: len(sub.msgs) > 2, 1.0), "a third PUBLISH came while two were unacknowledged")
    most = 0
    for released in range(1, total - 1):
        sub.c.release_one()
        sub.wait(lambda: len(sub.msgs) >= released + 2, "message %d after %d PUBACKs" % (released + 2, released))
        most = max(most, len(sub.msgs) - released)
        check(len(sub.msgs) <= released + 2, "%d messages received after only %d PUBACKs" % (len(sub.msgs), released))
    got = [m["payload"] for m in sub.msgs]
    check(got == [("m%d" % i).encode() for i in range(total)], "order %r" % got)
    sub.c.hold_pubacks = False
    while sub.c.held:
        sub.c.release_one()
    return "Receive Maximum 2: at most %d unacknowledged QoS 1 PUBLISHes out, the next one per PUBACK" % most


def scenario_will_on_disconnect_with_will():
    t = "pv5/will-04/"
    watch = Peer("pv5-will04-watch")
    watch.connect()
    watch.subscribe(t + "#", qos=1)
    keep = Peer("pv5-will04-keep")
    keep.c.will_set(t + "keep", b"kept-will", qos=1)
    keep.connect()
    keep.disconnect(reason=0x04)
    m = watch.wait_payload(b"kept-will", "the will after DISCONNECT 0x04")
    quiet = Peer("pv5-will04-quiet")
    quiet.c.will_set(t + "quiet", b"discarded-will", qos=1)
    quiet.connect()
    quiet.disconnect(reason=SUCCESS)
    pub = Peer("pv5-will04-pub")
    pub.connect()
    rest = fence(watch, pub, t + "fence")
    check([x["payload"] for x in rest] == [b"kept-will"], "received %r, want only the 0x04 will" % [x["payload"] for x in rest])
    return "DISCONNECT 0x04 publishes the will (on %s), DISCONNECT 0x00 discards it" % m["topic"]


def scenario_redelivery_on_reconnect():
    t = "pv5/redeliver/"
    cid = "pv5-redeliver-sub"
    sub = Peer(cid)
    sub.connect(SessionExpiryInterval=60)
    sub.subscribe(t + "#", qos=1)
    sub.c.hold_pubacks = True
    pub = Peer("pv5-redeliver-pub")
    pub.connect()
    pub.publish(t + "m", b"unacked", qos=1)
    first = sub.wait_payload(b"unacked")
    check(first["dup"] == 0, "first delivery marked DUP")
    sub.drop()
    back = Peer(cid)
    _, present, _ = back.connect(clean_start=False)
    check(present == 1, "session not present on reconnect")
    again = back.wait_payload(b"unacked", "the unacknowledged PUBLISH again")
    check(again["dup"] == 1, "re-sent PUBLISH without DUP")
    rest = fence(back, pub, t + "fence")
    check([m["payload"] for m in rest] == [b"unacked"], "after the PUBACK received %r" % [m["payload"] for m in rest])
    return "an unacknowledged QoS 1 PUBLISH is re-sent once with DUP on resume"


def scenario_will_delay():
    t = "pv5/willdelay/"
    watch = Peer("pv5-willdelay-watch")
    watch.connect()
    watch.subscribe(t + "#", qos=1)
    a = Peer("pv5-willdelay-a")
    a.c.will_set(t + "a", b"a-will", qos=1, properties=props(PacketTypes.WILLMESSAGE, WillDelayInterval=2))
    a.connect(SessionExpiryInterval=60)
    a.drop()
    dropped = time.monotonic()
    check(watch.stays(lambda: len(watch.msgs) > 0, 1.0), "will published within 1 s of a 2 s Will Delay")
    watch.wait_payload(b"a-will", "the delayed will")
    after = time.monotonic() - dropped
    b = Peer("pv5-willdelay-b")
    b.c.will_set(t + "b", b"b-will", qos=1, properties=props(PacketTypes.WILLMESSAGE, WillDelayInterval=2))
    b.connect(SessionExpiryInterval=60)
    b.drop()
    back = Peer("pv5-willdelay-b")
    _, present, _ = back.connect(clean_start=False, SessionExpiryInterval=0)
    check(present == 1, "session not present on the quick reconnect")
    check(watch.stays(lambda: any(m["payload"] == b"b-will" for m in watch.msgs), 4.0), "will published though the session resumed within the delay")
    back.disconnect()
    return "will published %.1f s after the drop (delay 2 s); a reconnect within the delay cancels it" % after


SCENARIOS = [v for k, v in list(globals().items()) if k.startswith("scenario_")]


def run(fn):
    name = fn.__name__[len("scenario_"):]
    try:
        detail, ok = fn(), True
    except Fail as e:
        detail, ok = str(e), False
    except Exception as e:  # a paho or socket error is a failed scenario, not a crash of the run
        frame = traceback.extract_tb(e.__traceback__)[-1]
        detail, ok = "%s: %s (line %d)" % (type(e).__name__, e, frame.lineno), False
    finally:
        while OPEN:
            OPEN.pop().close()
    print(json.dumps({"name": name, "ok": ok, "detail": detail}), flush=True)


if __name__ == "__main__":
    wanted = sys.argv[3:]
    for fn in SCENARIOS:
        if not wanted or fn.__name__[len("scenario_"):] in wanted:
            run(fn)
