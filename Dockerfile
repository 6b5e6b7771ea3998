# raftmq image: a build stage compiles the TypeScript, the runtime stage has the compiled broker and
# its production dependencies only. One image for a single node or a cluster node: the flags decide
# (cluster-scripts/compose.yaml runs three nodes behind HAProxy). docs/operations.md "Containers".
#   docker build -t raftmq .
#   docker run --rm -p 1883:1883 raftmq                  # one node in memory, on 0.0.0.0:1883
FROM node:20-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY src src
COPY raft raft
RUN npx tsc -p . && find build -name '*.test.*' -delete && find build -name '*.map' -delete

FROM node:20-slim
ENV NODE_ENV=production
WORKDIR /opt/raftmq
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
COPY --from=build /src/build/src build/src
COPY --from=build /src/build/raft build/raft
COPY cluster-scripts cluster-scripts
# The state file (cluster) or data directory (single node) lives here; a volume mounted on it
# starts with this owner.
RUN mkdir -p /var/lib/raftmq && chown node:node /var/lib/raftmq
USER node
# MQTT, raft peers, health (/health, /live, /metrics).
EXPOSE 1883 7000 8080
# SIGTERM is the clean stop (state file written); keep the runtime's stop timeout above
# --shutdown-timeout-ms (docker stop -t, compose stop_grace_period).
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "/opt/raftmq/build/src/cli.js"]
CMD ["--host", "0.0.0.0", "--port", "1883"]
