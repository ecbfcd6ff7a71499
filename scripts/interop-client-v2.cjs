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

const { ownerLocalTools, check, stdout, bounded, finish } = require('./interop-common.cjs');

const base = process.env.HANDNODE_URL;
const token = process.env.HANDNODE_TOKEN;

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
    finish();
  });
