#!/usr/bin/env node
// A Node subscriber for the Go interop tests (integration/rhea_test.go): plain rhea, the AMQP 1.0
// library the BabelQueue Node SDK is built on, attached as a Node service attaches a receiver to
// a topic subscription. rhea is installed by `scripts/node-peer setup` (NODE_PATH names its
// node_modules). One JSON object per line on stdout; rhea's own logging, if any, goes to stderr.
//
// Lines ("event" key):
//   ready    the receiver is attached: the source address, the capabilities asked for, and those
//            the broker answered with
//   message  one delivery, accepted after the line is written: body (a string; body_type says
//            which section it came in), message_id, correlation_id, subject, jms_type (the
//            x-opt-jms-type annotation), content_type, durable, delivery_count,
//            application_properties, message_annotations
//   done     the receiver stopped: received, reason ("max", "idle" or "stdin")
//   error    the peer failed: message (the exit status is then 1)
//
// Commands:
//   version
//   subscribe --source ADDRESS [--capability C ...] [--credit N] [--max N] [--idle SECONDS]
//             [--timeout SECONDS]
//
// subscribe attaches one receiver to ADDRESS (a subscription's full name, topic::subscription)
// with the source capabilities given (default: topic), without auto-accept, and stops after
// --max messages (0: no limit), after --idle seconds without a message (0: never), or at the
// end of stdin (the Go test closes it to stop the peer); --timeout (default 120) bounds the run
// and is an error when it passes. The broker comes from ARTEMIS_URL (amqp://[user:pass@]host:port),
// with ARTEMIS_USER and ARTEMIS_PASSWORD when the URL has no credentials. The password is never
// printed.
'use strict';

function emit(event, fields) {
  process.stdout.write(JSON.stringify(Object.assign({ event: event }, fields || {})) + '\n');
}

let secret = '';

function fail(err) {
  let msg = err && err.message ? err.message : String(err);
  if (err && err.condition) msg = err.condition + ': ' + msg;
  if (secret) msg = msg.split(secret).join('***');
  emit('error', { message: msg });
  process.exitCode = 1;
  // Let stdout drain, then leave whatever the connection is doing.
  process.stdout.write('', () => process.exit(1));
}

function parseArgs(argv) {
  const opts = { capabilities: [], credit: 10, max: 0, idle: 0, timeout: 120 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(a + ' needs a value');
      return argv[++i];
    };
    const number = () => {
      const v = value();
      const n = Number(v);
      if (!Number.isFinite(n) || n < 0) throw new Error(a + ': not a number >= 0: ' + v);
      return n;
    };
    switch (a) {
      case '--source': opts.source = value(); break;
      case '--capability': opts.capabilities.push(value()); break;
      case '--credit': opts.credit = number(); break;
      case '--max': opts.max = number(); break;
      case '--idle': opts.idle = number(); break;
      case '--timeout': opts.timeout = number(); break;
      default: throw new Error('unknown argument ' + a);
    }
  }
  if (!opts.source) throw new Error('--source is required');
  if (opts.capabilities.length === 0) opts.capabilities = ['topic'];
  if (opts.credit < 1) throw new Error('--credit must be at least 1');
  return opts;
}

function brokerOptions() {
  const raw = process.env.ARTEMIS_URL;
  if (!raw) throw new Error('ARTEMIS_URL is not set');
  const u = new URL(raw);
  if (u.protocol !== 'amqp:') throw new Error('ARTEMIS_URL: only amqp:// is supported, not ' + u.protocol);
  const username = u.username ? decodeURIComponent(u.username) : (process.env.ARTEMIS_USER || '');
  const password = u.password ? decodeURIComponent(u.password) : (process.env.ARTEMIS_PASSWORD || '');
  secret = password;
  const o = { host: u.hostname, port: Number(u.port || 5672), reconnect: false };
  if (username) {
    o.username = username;
    o.password = password;
  }
  return o;
}

// text is a body section as a string, and the kind of section it came in.
function text(body) {
  if (typeof body === 'string') return [body, 'amqp-value string'];
  if (Buffer.isBuffer(body)) return [body.toString('utf8'), 'amqp-value binary'];
  if (body && typeof body === 'object' && Buffer.isBuffer(body.content)) {
    return [body.content.toString('utf8'), 'data'];
  }
  if (body === undefined || body === null) return ['', 'none'];
  return [JSON.stringify(body), 'amqp-value ' + typeof body];
}

// plain is an AMQP value as JSON: strings, numbers and booleans as they are, the rest described.
function plain(v) {
  if (v === undefined || v === null) return null;
  if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') return v;
  if (Buffer.isBuffer(v)) return { binary: v.toString('hex') };
  if (v instanceof Date) return v.getTime();
  if (typeof v === 'object' && !Array.isArray(v)) {
    const out = {};
    for (const k of Object.keys(v)) out[k] = plain(v[k]);
    return out;
  }
  return String(v);
}

function subscribe(rhea, opts) {
  const broker = brokerOptions();
  const container = rhea.create_container({ id: 'bq-rhea-peer-' + process.pid });
  let received = 0;
  let stopping = false;
  let idleTimer = null;
  let conn = null;
  let receiver = null;

  const hardStop = setTimeout(() => fail(new Error('--timeout ' + opts.timeout + ' s passed after ' + received + ' message(s)')), opts.timeout * 1000);

  const stop = (reason) => {
    if (stopping) return;
    stopping = true;
    if (idleTimer) clearTimeout(idleTimer);
    // Dispositions go out before the detach and the close, in order: every accept is on the wire
    // before the broker sees the link end.
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      clearTimeout(hardStop);
      emit('done', { received: received, reason: reason });
      process.stdout.write('', () => process.exit(0));
    };
    conn.once('connection_close', finish);
    conn.once('disconnected', finish);
    // The broker's close answer is waited for, within a bound.
    setTimeout(finish, 10000).unref();
    if (receiver) receiver.close();
    conn.close();
  };

  const armIdle = () => {
    if (opts.idle <= 0) return;
    if (idleTimer) clearTimeout(idleTimer);
    idleTimer = setTimeout(() => stop('idle'), opts.idle * 1000);
  };

  container.on('error', fail);
  container.on('connection_error', (ctx) => fail(ctx.connection.error || new Error('connection error')));
  container.on('receiver_error', (ctx) => fail(ctx.receiver.error || new Error('receiver error')));
  container.on('disconnected', (ctx) => {
    if (!stopping) fail(ctx.error || new Error('disconnected from the broker'));
  });
  container.on('receiver_open', (ctx) => {
    const remote = ctx.receiver.remote && ctx.receiver.remote.attach && ctx.receiver.remote.attach.source;
    emit('ready', {
      source: opts.source,
      capabilities: opts.capabilities,
      remote_address: remote ? remote.address : null,
      remote_capabilities: remote && remote.capabilities ? [].concat(remote.capabilities).map(String) : [],
      rhea: rhea.version || require('rhea/package.json').version,
    });
    armIdle();
  });
  container.on('message', (ctx) => {
    if (stopping && opts.max > 0 && received >= opts.max) {
      // Past --max: leave it to the broker (released at the detach), never accepted unseen.
      ctx.delivery.release();
      return;
    }
    const m = ctx.message;
    const [body, bodyType] = text(m.body);
    const ann = m.message_annotations || {};
    emit('message', {
      body: body,
      body_type: bodyType,
      message_id: plain(m.message_id),
      correlation_id: plain(m.correlation_id),
      subject: plain(m.subject),
      jms_type: plain(ann['x-opt-jms-type']),
      content_type: plain(m.content_type),
      durable: !!m.durable,
      delivery_count: m.delivery_count || 0,
      application_properties: plain(m.application_properties || {}),
      message_annotations: plain(ann),
    });
    ctx.delivery.accept();
    received++;
    if (opts.max > 0 && received >= opts.max) {
      stop('max');
      return;
    }
    armIdle();
  });

  conn = container.connect(broker);
  receiver = conn.open_receiver({
    source: { address: opts.source, capabilities: opts.capabilities },
    autoaccept: false,
    credit_window: opts.credit,
  });

  process.stdin.on('end', () => stop('stdin'));
  process.stdin.on('error', () => stop('stdin'));
  process.stdin.resume();
}

function main() {
  const [cmd, ...rest] = process.argv.slice(2);
  let rhea;
  try {
    rhea = require('rhea');
  } catch (err) {
    throw new Error('rhea is not installed (run scripts/node-peer setup; NODE_PATH names its node_modules): ' + err.message);
  }
  switch (cmd) {
    case 'version':
      emit('version', { rhea: require('rhea/package.json').version, node: process.version });
      return;
    case 'subscribe':
      subscribe(rhea, parseArgs(rest));
      return;
    default:
      throw new Error('unknown command ' + JSON.stringify(cmd || '') + ' (version, subscribe)');
  }
}

try {
  main();
} catch (err) {
  fail(err);
}
