// The README's "Try it with your MCP client" block, taken as a user takes it: the JSON between
// <!-- mcp-client:begin --> and <!-- mcp-client:end --> in README.md, `<token>` replaced by the
// admin token and the README's port by the daemon's, handed to the official MCP TypeScript
// SDK's Client over its StreamableHTTPClientTransport with exactly that url and those headers.
// It connects, lists the tools and calls sys_info; the block with its placeholder left in is
// refused. Run by scripts/interop.sh:
//   MCP_SDK_PREFIX=<npm prefix holding @modelcontextprotocol/sdk> HANDNODE_URL=http://127.0.0.1:PORT
//   HANDNODE_TOKEN=<admin token> node scripts/interop-readme-client.cjs
// Prints PASS/FAIL per step and "N passed, M failed"; exits 1 on any failure.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { createRequire } = require('node:module');

const sdk = createRequire(path.join(process.env.MCP_SDK_PREFIX, 'package.json'));
const { Client } = sdk('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = sdk('@modelcontextprotocol/sdk/client/streamableHttp.js');

const { ownerLocalTools, check, bounded, finish } = require('./interop-common.cjs');

const BEGIN = '<!-- mcp-client:begin -->';
const END = '<!-- mcp-client:end -->';
// What the README's block must say, so that what a reader copies is what runs here.
const README_URL = 'http://127.0.0.1:8795/mcp';
const PLACEHOLDER = '<token>';

/** The README's block, parsed: the one server it names. Throws saying what is wrong. */
function readmeServer() {
  const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
  const start = readme.indexOf(BEGIN);
  const end = readme.indexOf(END);
  if (start < 0 || end < start) throw new Error(`README.md has no ${BEGIN} … ${END} block`);
  const fenced = readme.slice(start + BEGIN.length, end).trim();
  const m = /^```json\n([\s\S]*)\n```$/.exec(fenced);
  if (!m) throw new Error(`the block is not one fenced json block: ${fenced}`);
  const config = JSON.parse(m[1]);
  const names = Object.keys(config.mcpServers || {});
  if (names.length !== 1) throw new Error(`mcpServers names ${names.length} servers, not one`);
  return config.mcpServers[names[0]];
}

/** The block's server with the daemon's port and `token` put in, as a reader would. */
function filledIn(server, token) {
  const daemon = new URL(process.env.HANDNODE_URL);
  const url = new URL(server.url);
  url.port = daemon.port;
  const headers = {};
  for (const [name, value] of Object.entries(server.headers || {})) {
    headers[name] = value.split(PLACEHOLDER).join(token);
  }
  return { url, headers };
}

function client(url, headers) {
  const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers } });
  return { client: new Client({ name: 'handnode-readme', version: '0.0.0' }), transport };
}

async function main() {
  let server;
  try {
    server = readmeServer();
    check('the README holds one MCP client block', true);
  } catch (e) {
    check('the README holds one MCP client block', false, e.message);
    return;
  }
  check('its type is http', server.type === 'http', JSON.stringify(server));
  check(`its url is ${README_URL}`, server.url === README_URL, server.url);
  check(`its Authorization header is "Bearer ${PLACEHOLDER}"`,
    (server.headers || {}).Authorization === `Bearer ${PLACEHOLDER}`, JSON.stringify(server.headers));

  const { url, headers } = filledIn(server, process.env.HANDNODE_TOKEN);
  const c = client(url, headers);
  try {
    await bounded(c.client.connect(c.transport));
    check('the SDK connects with the block', true);
  } catch (e) {
    check('the SDK connects with the block', false, e.stack);
    return;
  }
  try {
    const { tools } = await bounded(c.client.listTools());
    const names = tools.map((t) => t.name).sort();
    const want = ownerLocalTools();
    check('tools/list: the owner\'s local tools', want.every((n) => names.includes(n)),
      `listed ${names.join(', ')}; want ${want.join(', ')}`);
  } catch (e) {
    check('tools/list', false, e.stack);
  }
  try {
    const r = await bounded(c.client.callTool({ name: 'sys_info', arguments: {} }));
    check('sys_info answers', !r.isError && !!r.structuredContent, JSON.stringify(r).slice(0, 400));
  } catch (e) {
    check('sys_info answers', false, e.stack);
  }
  await c.client.close();

  // The block as copied, placeholder and all, is refused: the header is what lets it in.
  const raw = client(url, server.headers);
  try {
    await bounded(raw.client.connect(raw.transport));
    check('the block with <token> left in is refused', false, 'connect succeeded');
  } catch (e) {
    check('the block with <token> left in is refused', /401|unauthorized/i.test(String(e.message)), e.message);
  }
  await raw.client.close().catch(() => {});
}

main()
  .catch((e) => check('no unexpected error', false, e.stack))
  .finally(() => {
    finish();
    // The SDK may keep a socket open; the result is in.
    setTimeout(() => process.exit(process.exitCode), 100).unref();
  });
