// `raftmq passwd [-b] [--scram] FILE USER [PASSWORD]`: adds USER to the password file or replaces its
// hash; with --scram the line holds a SCRAM-SHA-256 credential instead of a scrypt hash.
// The password comes from a prompt without echo on a terminal, else from the first line of stdin;
// with -b (batch, as mosquitto_passwd -b) it is the third argument, which other users of the
// machine can see in the process list. The file is written to a temporary file with mode 0600,
// synced, and renamed over the old one, so a reader never sees half a file.
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { hashPassword, parsePasswordFile, scramPassword, upsertUser, usernameProblem } from './password-file.js';

export const PASSWD_USAGE = `Usage: raftmq passwd [--scram] FILE USER            (password from a prompt, or the first line of stdin)
       raftmq passwd [--scram] -b FILE USER PASSWORD  (batch: the password is visible in the process list)
Adds USER to FILE, or replaces its password. FILE is created with mode 0600 if missing.
--scram stores a SCRAM-SHA-256 credential (for MQTT 5 enhanced authentication and plain passwords)
instead of a scrypt hash (plain passwords only).`;

export interface PasswdIo {
  stdin: NodeJS.ReadStream;
  stdout: NodeJS.WriteStream;
  stderr: NodeJS.WriteStream;
}

/** Runs the subcommand; resolves with the exit code (0 done, 1 I/O failure, 2 usage or bad input). */
export async function runPasswd(args: readonly string[], io: PasswdIo): Promise<number> {
  if (args.length === 1 && (args[0] === '--help' || args[0] === '-h')) {
    io.stdout.write(`${PASSWD_USAGE}\n`);
    return 0;
  }
  let flags = 0;
  while (flags < args.length && (args[flags] === '-b' || args[flags] === '--scram')) flags++;
  const given = args.slice(0, flags);
  const batch = given.includes('-b');
  const scram = given.includes('--scram');
  const rest = args.slice(flags);
  if (new Set(given).size !== given.length || rest.length !== (batch ? 3 : 2) || rest.some((a) => a.startsWith('-'))) {
    io.stderr.write(`${PASSWD_USAGE}\n`);
    return 2;
  }
  const [file, user] = rest as [string, string];
  const bad = usernameProblem(user);
  if (bad !== null) {
    io.stderr.write(`raftmq passwd: ${bad}\n`);
    return 2;
  }
  let password: string | null;
  try {
    password = batch ? (rest[2] as string) : await readPassword(io);
  } catch (err) {
    io.stderr.write(`raftmq passwd: ${(err as Error).message}\n`);
    return 2;
  }
  if (password === null || password.length === 0) {
    io.stderr.write('raftmq passwd: empty password\n');
    return 2;
  }
  let old = '';
  try {
    old = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
      io.stderr.write(`raftmq passwd: cannot read ${file}: ${(err as Error).message}\n`);
      return 1;
    }
  }
  const parsed = parsePasswordFile(old);
  if ('problem' in parsed) {
    io.stderr.write(`raftmq passwd: ${file}:${parsed.problem.line}: ${parsed.problem.reason}\n`);
    return 2;
  }
  let hash: string;
  try {
    hash = scram ? scramPassword(password) : hashPassword(password);
  } catch (err) {
    // SASLprep refuses the password for a SCRAM line (src/server/saslprep.ts).
    io.stderr.write(`raftmq passwd: ${(err as Error).message}\n`);
    return 2;
  }
  try {
    writeAtomically(file, upsertUser(old, user, hash));
  } catch (err) {
    io.stderr.write(`raftmq passwd: cannot write ${file}: ${(err as Error).message}\n`);
    return 1;
  }
  return 0;
}

/** Write a temporary file beside the target (mode 0600), fsync, rename, fsync the directory. */
export function writeAtomically(file: string, text: string): void {
  const tmp = `${file}.tmp-${process.pid}`;
  const fd = openSync(tmp, 'w', 0o600);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    unlinkSync(tmp);
    throw err;
  }
  closeSync(fd);
  renameSync(tmp, file);
  const dir = openSync(dirname(file), 'r');
  try {
    fsyncSync(dir);
  } finally {
    closeSync(dir);
  }
}

/** Prompts twice without echo on a terminal; otherwise the first line of stdin. */
async function readPassword(io: PasswdIo): Promise<string | null> {
  if (!io.stdin.isTTY) return firstLine(io.stdin);
  const first = await promptHidden(io, 'Password: ');
  const again = await promptHidden(io, 'Reenter password: ');
  if (first !== again) throw new Error('passwords do not match');
  return first;
}

const STDIN_BYTES_MAX = 65_536;

function firstLine(stdin: NodeJS.ReadStream): Promise<string | null> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const done = (v: string | null): void => {
      stdin.off('data', onData);
      stdin.off('end', onEnd);
      stdin.pause();
      resolve(v);
    };
    const onData = (chunk: Buffer | string): void => {
      buf += chunk.toString();
      const nl = buf.search(/\r?\n/);
      if (nl >= 0) done(buf.slice(0, nl));
      else if (buf.length > STDIN_BYTES_MAX) reject(new Error('no line break in the first 64 KiB of stdin'));
    };
    const onEnd = (): void => done(buf.length > 0 ? buf : null);
    stdin.on('data', onData);
    stdin.on('end', onEnd);
  });
}

function promptHidden(io: PasswdIo, prompt: string): Promise<string> {
  return new Promise((resolve, reject) => {
    io.stderr.write(prompt);
    io.stdin.setRawMode(true);
    io.stdin.resume();
    let typed = '';
    const finish = (err: Error | null): void => {
      io.stdin.setRawMode(false);
      io.stdin.pause();
      io.stdin.off('data', onData);
      io.stderr.write('\n');
      if (err === null) resolve(typed);
      else reject(err);
    };
    const onData = (chunk: Buffer): void => {
      for (const ch of chunk.toString('utf8')) {
        if (ch === '\r' || ch === '\n' || ch === '\u0003') {
          finish(ch === '\u0003' ? new Error('interrupted') : null);
          return;
        }
        if (ch === '\u007f' || ch === '\b') typed = typed.slice(0, -1);
        else typed += ch;
      }
    };
    io.stdin.on('data', onData);
  });
}
