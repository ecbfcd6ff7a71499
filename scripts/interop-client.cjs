// An MCP client nobody here wrote — the official TypeScript SDK's Client over its
// StreamableHTTPClientTransport — against handnode's POST /mcp. Run by scripts/interop.sh:
//   MCP_SDK_PREFIX=<npm prefix holding @modelcontextprotocol/sdk> HANDNODE_URL=http://127.0.0.1:PORT
//   HANDNODE_TOKEN=<admin token> node scripts/interop-client.cjs
// Prints PASS/FAIL per step and "N passed, M failed"; exits 1 on any failure.
'use strict';

const path = require('node:path');
const { createRequire } = require('node:module');

const sdk = createRequire(path.join(process.env.MCP_SDK_PREFIX, 'package.json'));
const { Client } = sdk('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = sdk('@modelcontextprotocol/sdk/client/streamableHttp.js');
const sdkVersion = require(path.join(process.env.MCP_SDK_PREFIX,
  'node_modules/@modelcontextprotocol/sdk/package.json')).version;

const { ownerLocalTools, check, stdout, bounded, finish } = require('./interop-common.cjs');

const base = process.env.HANDNODE_URL;
const token = process.env.HANDNODE_TOKEN;

function connect(bearer) {
  const transport = new StreamableHTTPClientTransport(new URL('/mcp', base), {
    requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
  });
  const client = new Client({ name: 'handnode-interop', version: '0.0.0' });
  return { client, transport };
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Poll `pred` every 20 ms for at most `ms`; true if it held.
async function until(pred, ms = 10000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (pred()) return true;
    await sleep(20);
  }
  return pred();
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code !== 'ESRCH';
  }
}

// Aborting a call makes the SDK send notifications/cancelled: the bash process group dies,
// and the HTTP answer to the cancelled request is one the SDK accepts without an error.
async function cancellation(client, transport) {
  const dir = process.env.INTEROP_TMP;
  const pidFile = path.join(dir, 'cancel.pid');
  const fs = require('node:fs');
  const sends = [];
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    const p = send(message, options);
    if (message.method === 'tools/call') sends.push(p.then(() => 'ok', (e) => `rejected: ${e.message}`));
    return p;
  };
  const errors = [];
  client.onerror = (e) => errors.push(String(e && e.message));
  const ac = new AbortController();
  const call = client.callTool({ name: 'bash', arguments: { command: `echo $$ > ${pidFile}; exec sleep 60` } },
    undefined, { signal: ac.signal }).then(() => 'finished', (e) => `rejected: ${e.name} ${e.message}`);
  const started = await until(() => fs.existsSync(pidFile) && fs.readFileSync(pidFile, 'utf8').trim() !== '');
  check('cancel: the long bash call started', started);
  if (!started) return;
  const pid = Number(fs.readFileSync(pidFile, 'utf8').trim());
  ac.abort('interop test');
  const outcome = await bounded(call);
  check('cancel: the aborted call rejects on the client', outcome.startsWith('rejected'), outcome);
  check('cancel: the process group is killed', await until(() => !alive(pid)), `pid ${pid} still alive`);
  const settled = sends.length ? await bounded(sends[sends.length - 1]) : 'no tools/call sent';
  check('cancel: the HTTP answer to the cancelled request is accepted by the SDK', settled === 'ok', settled);
  check('cancel: no transport error reported', errors.length === 0, JSON.stringify(errors));
  transport.send = send;
}

const HINTS = ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint'];

async function main() {
  console.log(`(official MCP TypeScript SDK ${sdkVersion}, node ${process.version})`);
  const { client, transport } = connect(token);
  try {
    await bounded(client.connect(transport));
    check('connect: initialize + notifications/initialized', true);
  } catch (e) {
    check('connect: initialize + notifications/initialized', false, e.stack);
    return;
  }
  const info = client.getServerVersion();
  check('serverInfo.name is handnode', info && info.name === 'handnode', JSON.stringify(info));
  const caps = client.getServerCapabilities();
  check('capabilities announce tools', caps && caps.tools, JSON.stringify(caps));
  check('instructions are given', (client.getInstructions() || '').length > 0);
  check('a session id was issued', typeof transport.sessionId === 'string' && transport.sessionId.length > 0,
    String(transport.sessionId));

  try {
    const { tools } = await bounded(client.listTools());
    const names = tools.map((t) => t.name).sort();
    const expected = ownerLocalTools();
    check(`tools/list: the ${expected.length} local tools of docs/classes.md`,
      expected.length >= 5 && JSON.stringify(names) === JSON.stringify(expected),
      `${JSON.stringify(names)} against ${JSON.stringify(expected)}`);
    const bad = tools.filter((t) => !t.annotations || HINTS.some((h) => typeof t.annotations[h] !== 'boolean'));
    check('tools/list: every tool has all four annotations', bad.length === 0,
      JSON.stringify(bad.map((t) => [t.name, t.annotations])));
    const bash = tools.find((t) => t.name === 'bash');
    check('bash is a destructive, not read-only tool',
      bash && bash.annotations.readOnlyHint === false && bash.annotations.destructiveHint === true,
      JSON.stringify(bash && bash.annotations));
  } catch (e) {
    check('tools/list', false, e.stack);
  }

  try {
    // callTool also validates structuredContent against the tool's outputSchema, if any.
    const r = await bounded(client.callTool({ name: 'bash', arguments: { command: 'echo hi' } }));
    const text = (r.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('');
    check('tools/call bash echo hi → hi', !r.isError && text.startsWith('hi') &&
      (!r.structuredContent || stdout(r) === 'hi\n'), JSON.stringify(r));
  } catch (e) {
    check('tools/call bash echo hi', false, e.stack);
  }

  try {
    const r = await bounded(client.callTool({ name: 'bash', arguments: { command: 'exit 3' } }));
    check('tools/call bash exit 3 → isError result', r.isError === true, JSON.stringify(r));
  } catch (e) {
    check('tools/call bash exit 3', false, e.stack);
  }

  try {
    const r = await bounded(client.callTool({ name: 'sys_info', arguments: {} }));
    check('tools/call sys_info', !r.isError && r.structuredContent &&
      typeof r.structuredContent.hostname === 'string', JSON.stringify(r).slice(0, 2000));
  } catch (e) {
    check('tools/call sys_info', false, e.stack);
  }

  try {
    await bounded(client.callTool({ name: 'no_such_tool', arguments: {} }));
    check('an unknown tool is refused with -32602', false, 'the call succeeded');
  } catch (e) {
    check('an unknown tool is refused with -32602', e.code === -32602, e.stack);
  }

  try {
    await bounded(client.ping());
    check('ping', true);
  } catch (e) {
    check('ping', false, e.stack);
  }

  await cancellation(client, transport);

  try {
    await bounded(transport.terminateSession());
    check('terminateSession (DELETE /mcp)', transport.sessionId === undefined, String(transport.sessionId));
  } catch (e) {
    check('terminateSession (DELETE /mcp)', false, e.stack);
  }
  await client.close();

  // A wrong token: the SDK's connect must fail, not hang.
  const wrong = connect('not-the-token');
  try {
    await bounded(wrong.client.connect(wrong.transport));
    check('a wrong token is refused', false, 'connect succeeded');
  } catch (e) {
    check('a wrong token is refused', /401|nauthorized/.test(String(e && e.message)), e.stack);
  }
  await wrong.client.close().catch(() => {});
}

main()
  .catch((e) => check('the interop run', false, e.stack))
  .finally(() => {
    finish();
  });
