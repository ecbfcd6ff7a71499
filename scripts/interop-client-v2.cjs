// The official MCP TypeScript SDK 2.x client (`@modelcontextprotocol/client`, its Client over
// its StreamableHTTPClientTransport) against handnode's POST /mcp, once per era it speaks:
// the legacy handshake (its default mode, which asks for 2025-11-25) and the stateless
// revision (pinned to 2026-07-28: no initialize, `_meta` and the Mcp-* headers on every
// request). Run by scripts/interop.sh:
//   MCP_CURRENT_PREFIX=<npm prefix holding @modelcontextprotocol/client> HANDNODE_URL=http://127.0.0.1:PORT
//   HANDNODE_TOKEN=<admin token> node scripts/interop-client-v2.cjs
// Prints PASS/FAIL per step and "N passed, M failed"; exits 1 on any failure.
'use strict';

const path = require('node:path');
const fs = require('node:fs');
const { createRequire } = require('node:module');

const prefix = process.env.MCP_CURRENT_PREFIX;
const sdk = createRequire(path.join(prefix, 'package.json'));
const { Client, StreamableHTTPClientTransport } = sdk('@modelcontextprotocol/client');
const sdkVersion = JSON.parse(fs.readFileSync(
  path.join(prefix, 'node_modules/@modelcontextprotocol/client/package.json'), 'utf8')).version;

/** The owner's local tools, from docs/classes.md (as scripts/interop-client.cjs reads them). */
function ownerLocalTools() {
  const doc = fs.readFileSync(path.join(__dirname, '..', 'docs', 'classes.md'), 'utf8');
  const section = doc.split('\n## Local tools')[1].split('\n## ')[0];
  return section.split('\n')
    .map((line) => line.split('|').map((cell) => cell.trim()))
    .filter((cells) => /^`[a-z_]+`$/.test(cells[1] || '') && cells[3] === '✓')
    .map((cells) => cells[1].slice(1, -1))
    .sort();
}

const base = process.env.HANDNODE_URL;
const token = process.env.HANDNODE_TOKEN;
let passed = 0;
let failed = 0;

function check(name, ok, detail) {
  if (ok) {
    passed += 1;
    console.log(`PASS: ${name}`);
  } else {
    failed += 1;
    console.log(`FAIL: ${name}${detail === undefined ? '' : ` — ${detail}`}`);
  }
}

// A bash result's stdout: the streams are in its text block, `stdout_range` says where
// (byte offsets of its UTF-8).
function stdout(r) {
  const text = Buffer.from(((r.content || [])[0] || {}).text || '', 'utf8');
  const [a, b] = (r.structuredContent && r.structuredContent.stdout_range) || [0, 0];
  return text.subarray(a, b).toString('utf8');
}

// Every step is bounded: a hang fails the step rather than the whole run.
function bounded(promise, ms = 15000) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

async function era(label, mode, expectedVersion) {
  const transport = new StreamableHTTPClientTransport(new URL('/mcp', base), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'handnode-interop-v2', version: '0.0.0' },
    mode ? { versionNegotiation: { mode } } : {});
  const step = (name) => `${label}: ${name}`;
  try {
    await bounded(client.connect(transport));
    check(step('connect'), true);
  } catch (e) {
    check(step('connect'), false, e.stack);
    return;
  }
  const version = client.getNegotiatedProtocolVersion();
  check(step(`protocol version ${expectedVersion}`), version === expectedVersion, String(version));
  const info = client.getServerVersion();
  check(step('serverInfo.name is handnode'), info && info.name === 'handnode', JSON.stringify(info));

  try {
    const { tools } = await bounded(client.listTools());
    const names = tools.map((t) => t.name).sort();
    const expected = ownerLocalTools();
    check(step(`tools/list: the ${expected.length} local tools of docs/classes.md`),
      expected.length >= 5 && JSON.stringify(names) === JSON.stringify(expected),
      `${JSON.stringify(names)} against ${JSON.stringify(expected)}`);
    const withSchema = ['bash', 'sys_info'].filter((n) => {
      const t = tools.find((x) => x.name === n);
      return t && t.outputSchema && t.outputSchema.type === 'object';
    });
    check(step('bash and sys_info declare an outputSchema'), withSchema.length === 2,
      JSON.stringify(withSchema));
  } catch (e) {
    check(step('tools/list'), false, e.stack);
  }

  try {
    // callTool validates structuredContent against the tool's outputSchema.
    const r = await bounded(client.callTool({ name: 'bash', arguments: { command: 'echo hi' } }));
    const text = (r.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('');
    check(step('tools/call bash echo hi → hi, structuredContent valid'),
      !r.isError && text.startsWith('hi') && r.structuredContent && stdout(r) === 'hi\n',
      JSON.stringify(r));
  } catch (e) {
    check(step('tools/call bash echo hi'), false, e.stack);
  }

  try {
    const r = await bounded(client.callTool({ name: 'sys_info', arguments: {} }));
    check(step('tools/call sys_info, structuredContent valid'), !r.isError && r.structuredContent &&
      typeof r.structuredContent.hostname === 'string', JSON.stringify(r).slice(0, 2000));
  } catch (e) {
    check(step('tools/call sys_info'), false, e.stack);
  }

  // From 2025-11-25 on, invalid arguments are a tool error the model can read and correct.
  try {
    const r = await bounded(client.callTool({ name: 'bash', arguments: { command: 'true', timeout_secs: -1 } }));
    const text = (r.content || []).map((c) => c.text || '').join('');
    check(step('invalid arguments → isError result naming the field'),
      r.isError === true && text.includes('timeout_secs'), JSON.stringify(r));
  } catch (e) {
    check(step('invalid arguments → isError result'), false, e.stack);
  }

  try {
    await bounded(client.callTool({ name: 'no_such_tool', arguments: {} }));
    check(step('an unknown tool is refused with -32602'), false, 'the call succeeded');
  } catch (e) {
    check(step('an unknown tool is refused with -32602'), e.code === -32602, e.stack);
  }
  await client.close().catch(() => {});
}

async function main() {
  console.log(`(official MCP TypeScript SDK client ${sdkVersion}, node ${process.version})`);
  await era('legacy', undefined, '2025-11-25');
  await era('stateless', { pin: '2026-07-28' }, '2026-07-28');
}

main()
  .catch((e) => check('the interop run', false, e.stack))
  .finally(() => {
    console.log(`${passed} passed, ${failed} failed`);
    process.exitCode = failed === 0 && passed > 0 ? 0 : 1;
  });
