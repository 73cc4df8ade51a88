/**
 * Start a real `jupyter lab` for the browser tests: a temporary root dir with
 * the test notebooks, its own config/data/runtime/settings dirs (nothing of
 * the developer's leaks in or out), a token, and the news toast switched off.
 */
'use strict';

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const crypto = require('node:crypto');

const REPO = path.resolve(__dirname, '..', '..');

/** The jupyter executable: $NBV_JUPYTER, the repo's .venv, or PATH. */
function jupyterBin() {
  if (process.env.NBV_JUPYTER) {
    return process.env.NBV_JUPYTER;
  }
  const venv = path.join(REPO, '.venv', 'bin', 'jupyter');
  return fs.existsSync(venv) ? venv : 'jupyter';
}

function chromiumPath() {
  return process.env.NBV_CHROMIUM || '/usr/bin/chromium';
}

/** Flags that keep headless Chromium off the network and quiet. */
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-dev-shm-usage'
];

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function notebook(cells) {
  return JSON.stringify(
    {
      cells: cells.map(([type, source, stdout], i) =>
        type === 'code'
          ? {
              cell_type: 'code',
              execution_count: stdout === undefined ? null : i + 1,
              metadata: {},
              outputs:
                stdout === undefined
                  ? []
                  : [{ output_type: 'stream', name: 'stdout', text: stdout }],
              source
            }
          : { cell_type: 'markdown', metadata: {}, source }
      ),
      metadata: {
        kernelspec: { display_name: 'Python 3 (ipykernel)', language: 'python', name: 'python3' },
        language_info: { name: 'python' }
      },
      nbformat: 4,
      nbformat_minor: 5
    },
    null,
    1
  );
}

/** The notebooks the tests validate (root-relative path → content). */
const NOTEBOOKS = {
  // a folder without requirements.txt: the build makes a bare environment
  'passing/passing.ipynb': notebook([
    ['markdown', '# A notebook that runs'],
    ['code', 'print(1+1)']
  ]),
  // 1/0 in the 2nd code cell, which is cell index 2 (a markdown cell precedes it)
  'failing/failing.ipynb': notebook([
    ['code', 'x = 1\nprint(x)'],
    ['markdown', 'The next cell divides by zero.'],
    ['code', 'y = x + 1\n1/0'],
    ['code', 'print("never reached")']
  ]),
  // golden comparison: the golden copy recorded a different output
  'golden/current.ipynb': notebook([
    ['code', 'print("same")'],
    ['code', 'print("hello", 1 + 1)']
  ]),
  'golden/expected.ipynb': notebook([
    ['code', 'print("same")', 'same\n'],
    ['code', 'print("hello", 1 + 1)', 'hello 1\n']
  ])
};

async function waitForHealth(base, token, proc, logFile, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) {
      throw new Error(`jupyter lab exited with ${proc.exitCode}; log:\n${tail(logFile)}`);
    }
    try {
      const r = await fetch(`${base}nbvalidation/api/v1/health`, {
        headers: { Authorization: `token ${token}` }
      });
      last = `${r.status} ${await r.text()}`;
      if (r.status === 200) {
        const health = JSON.parse(last.slice(4));
        // the backend reports usable once it has started (a moment after the server);
        // "starting: ..." is not an answer yet, any other problem is
        const starting = String(health.problem || '').startsWith('starting');
        if (health.usable || (health.problem && !starting) || Date.now() > deadline - 60_000) {
          return health;
        }
      }
      if (r.status === 404) {
        // the server answers but our extension is not there (yet?)
        const lab = await fetch(`${base}lab?token=${token}`);
        if (lab.status === 200) {
          throw new Error(
            `the jupyter_nbvalidation server extension is not enabled (health: ${last}); log:\n${tail(logFile)}`
          );
        }
      }
    } catch (e) {
      if (String(e.message).includes('not enabled')) {
        throw e;
      }
      last = String(e);
    }
    await new Promise(r => setTimeout(r, 300));
  }
  throw new Error(`jupyter lab did not become ready (${last}); log:\n${tail(logFile)}`);
}

/** Wait for the lab page alone (used when our server extension is off). */
async function waitForLab(base, token, proc, logFile, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) {
      throw new Error(`jupyter lab exited with ${proc.exitCode}; log:\n${tail(logFile)}`);
    }
    try {
      const r = await fetch(`${base}lab?token=${token}`);
      if (r.status === 200) {
        const h = await fetch(`${base}nbvalidation/api/v1/health?token=${token}`);
        return { status: h.status };
      }
    } catch {
      // not up yet
    }
    await new Promise(r => setTimeout(r, 300));
  }
  throw new Error(`jupyter lab did not become ready; log:\n${tail(logFile)}`);
}

function tail(file, n = 60) {
  try {
    return fs.readFileSync(file, 'utf8').split('\n').slice(-n).join('\n');
  } catch {
    return '(no log)';
  }
}

/**
 * Start the lab; resolves to {base, token, root, logFile, health, stop()}.
 * `overrides` adds JupyterLab setting overrides (e.g. a theme); `files` adds
 * files to the root (relative path → content); `serverConfig` is server config
 * (`{NBValidation: {schedule_seconds_field: true}}`), written to the lab's own
 * config dir.
 */
async function startLab({
  overrides = {},
  withoutServerExtension = false,
  files = {},
  serverConfig = {}
} = {}) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'nbv-e2e-'));
  const dirs = {};
  for (const d of [
    'root',
    'config',
    'data',
    'runtime',
    'settings',
    'user-settings',
    'workspaces'
  ]) {
    dirs[d] = path.join(tmp, d);
    fs.mkdirSync(dirs[d], { recursive: true });
  }
  for (const [rel, content] of Object.entries({ ...NOTEBOOKS, ...files })) {
    const file = path.join(dirs.root, rel);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, content);
  }
  // The news toast would cover the panel and try to reach the internet.
  fs.writeFileSync(
    path.join(dirs.settings, 'overrides.json'),
    JSON.stringify({
      '@jupyterlab/apputils-extension:notification': { fetchNews: 'false', checkForUpdates: false },
      ...overrides
    })
  );
  const config = { ...serverConfig };
  if (withoutServerExtension) {
    // the user config dir outranks the venv's jupyter_server_config.d
    config.ServerApp = {
      ...(config.ServerApp ?? {}),
      jpserver_extensions: { jupyter_nbvalidation: false }
    };
  }
  if (Object.keys(config).length) {
    fs.writeFileSync(path.join(dirs.config, 'jupyter_server_config.json'), JSON.stringify(config));
  }
  const port = await freePort();
  const token = crypto.randomBytes(16).toString('hex');
  const logFile = path.join(tmp, 'lab.log');
  const log = fs.openSync(logFile, 'w');
  const args = [
    'lab',
    '--no-browser',
    '--ip=127.0.0.1',
    `--port=${port}`,
    '--port-retries=0',
    `--ServerApp.token=${token}`,
    `--ServerApp.root_dir=${dirs.root}`,
    '--ServerApp.allow_root=True',
    `--LabApp.app_settings_dir=${dirs.settings}`,
    `--LabApp.user_settings_dir=${dirs['user-settings']}`,
    `--LabApp.workspaces_dir=${dirs.workspaces}`
  ];
  const env = {
    ...process.env,
    JUPYTER_CONFIG_DIR: dirs.config,
    JUPYTER_DATA_DIR: dirs.data,
    JUPYTER_RUNTIME_DIR: dirs.runtime,
    PYTHONUNBUFFERED: '1'
  };
  // The labextension this checkout built (jlpm build:prod writes jupyter_nbvalidation/labextension)
  // comes first on JUPYTER_PATH, so the tests load it and not an older copy installed in the venv
  // (share/jupyter/labextensions): a worktree tests its own frontend without touching the venv.
  const built = path.join(REPO, 'jupyter_nbvalidation', 'labextension');
  if (
    fs.existsSync(path.join(built, 'package.json')) &&
    fs.existsSync(path.join(built, 'static'))
  ) {
    const jpath = path.join(tmp, 'jupyter-path');
    fs.mkdirSync(path.join(jpath, 'labextensions'), { recursive: true });
    fs.symlinkSync(built, path.join(jpath, 'labextensions', 'jupyter-nbvalidation'));
    env.JUPYTER_PATH = env.JUPYTER_PATH ? `${jpath}${path.delimiter}${env.JUPYTER_PATH}` : jpath;
  }
  // venv bin first so the lab finds the venv's tools (uv, python) too
  const bin = path.dirname(jupyterBin());
  if (bin !== '.') {
    env.PATH = `${bin}${path.delimiter}${env.PATH}`;
  }
  const proc = spawn(jupyterBin(), args, { env, stdio: ['ignore', log, log], detached: false });
  const base = `http://127.0.0.1:${port}/`;
  let health;
  try {
    health = withoutServerExtension
      ? await waitForLab(base, token, proc, logFile, 240_000)
      : await waitForHealth(base, token, proc, logFile, 240_000);
  } catch (e) {
    proc.kill('SIGTERM');
    throw e;
  }
  const stop = async () => {
    if (proc.exitCode === null) {
      proc.kill('SIGTERM');
      await Promise.race([
        new Promise(r => proc.once('exit', r)),
        new Promise(r => setTimeout(r, 15_000))
      ]);
      if (proc.exitCode === null) {
        proc.kill('SIGKILL');
      }
    }
    fs.closeSync(log);
  };
  return { base, token, root: dirs.root, tmp, logFile, health, proc, stop };
}

const PANEL = '#nbvalidation-panel';
const VISIBLE_NB = '.jp-NotebookPanel:not(.lm-mod-hidden)';

/**
 * The set-up a browser test file shares: a lab with `files`, one headless
 * Chromium page on it (the extension's page errors and deprecation warnings
 * collected), and what its tests call: `rest` (the REST API as the CLI calls
 * it), `openNotebook` and `waitForVerdict`. Registers node:test `before` and
 * `after` hooks (the lab and page are set, and `ready(session)` called, once
 * `before` has run); `name` names
 * the artifacts (lab-NAME.log, NAME-timeout.png in `artifacts`).
 */
function browserSession({
  name,
  files,
  artifacts,
  jobTimeout,
  serverConfig = {},
  ready = () => undefined
}) {
  const { after, before } = require('node:test');
  const assert = require('node:assert/strict');
  const s = { lab: null, browser: null, page: null, pageErrors: [], consoleWarnings: [] };

  before(async () => {
    const { chromium } = require('playwright-core');
    fs.mkdirSync(artifacts, { recursive: true });
    s.lab = await startLab({ files, serverConfig });
    console.log(
      `# lab at ${s.lab.base} (backend ${s.lab.health.backend}, usable ${s.lab.health.usable})`
    );
    s.browser = await chromium.launch({
      executablePath: chromiumPath(),
      headless: true,
      args: CHROMIUM_ARGS
    });
    const context = await s.browser.newContext({
      viewport: { width: 1440, height: 900 },
      acceptDownloads: true
    });
    s.page = await context.newPage();
    s.page.on('pageerror', e => s.pageErrors.push(`${e}\n${e.stack ?? ''}`));
    s.page.on('console', m => {
      if (m.type() === 'error' && /nbvalidation/i.test(m.text())) {
        s.pageErrors.push(`console: ${m.text()}`);
      }
      if (m.type() === 'warning' && /nbvalidation/i.test(m.text()) && /deprecat/i.test(m.text())) {
        s.consoleWarnings.push(m.text());
      }
    });
    ready(s);
  });

  after(async () => {
    if (s.browser) {
      await s.browser.close();
    }
    if (s.lab) {
      await s.lab.stop();
      fs.copyFileSync(s.lab.logFile, path.join(artifacts, `lab-${name}.log`));
      fs.rmSync(s.lab.tmp, { recursive: true, force: true });
    }
  });

  /** One REST call to the server as the CLI would make it. */
  s.rest = async (method, route, body) => {
    const r = await fetch(`${s.lab.base}${route}`, {
      method,
      headers: { Authorization: `token ${s.lab.token}`, 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body)
    });
    const text = await r.text();
    return { status: r.status, body: text ? JSON.parse(text) : null };
  };

  /** Switch the lab's theme through its settings API (the page follows on its next load). */
  s.setTheme = async theme => {
    const r = await fetch(`${s.lab.base}lab/api/settings/@jupyterlab/apputils-extension:themes`, {
      method: 'PUT',
      headers: { Authorization: `token ${s.lab.token}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ raw: JSON.stringify({ theme }) })
    });
    assert.ok(r.status < 300, `theme ${theme}: ${r.status} ${await r.text()}`);
  };

  /** The panel's picture in the artifacts; with ``docs``, also in docs/screenshots/lab/ when
   * NBV_UPDATE_DOCS_SHOTS=1 (only on request: a test run leaves the checkout as it found it). */
  s.panelShot = async (file, docs = false) => {
    await s.page.mouse.move(0, 0);
    await s.page.waitForTimeout(300);
    const out = path.join(artifacts, file);
    await s.page.locator(PANEL).screenshot({ path: out });
    if (docs && process.env.NBV_UPDATE_DOCS_SHOTS === '1') {
      const shots = path.join(REPO, 'docs', 'screenshots', 'lab');
      fs.mkdirSync(shots, { recursive: true });
      fs.copyFileSync(out, path.join(shots, file));
    }
  };

  s.openNotebook = async (rel, { reset = true } = {}) => {
    const page = s.page;
    await page.goto(`${s.lab.base}lab/tree/${rel}?${reset ? 'reset&' : ''}token=${s.lab.token}`);
    await page.waitForSelector('#jp-main-dock-panel', { timeout: 60_000 });
    await page
      .locator(VISIBLE_NB)
      .filter({ has: page.locator('.jp-Notebook') })
      .first()
      .waitFor({ timeout: 60_000 });
    const button = page.locator(
      `${VISIBLE_NB} .jp-NotebookPanel-toolbar [data-command="nbvalidation:validate"]`
    );
    await button.first().waitFor({ timeout: 30_000 });
    await page
      .locator(`${VISIBLE_NB} .jp-Notebook-ExecutionIndicator[data-status="idle"]`)
      .first()
      .waitFor({ timeout: 30_000 })
      .catch(() => undefined);
    return button.first();
  };

  /** Wait until the panel's verdict is terminal; returns its data-phase. */
  s.waitForVerdict = async () => {
    const verdict = s.page.locator(`${PANEL} .jp-NBValidation-verdict`);
    await verdict.waitFor({ timeout: 30_000 });
    const deadline = Date.now() + jobTimeout;
    for (;;) {
      const phase = await verdict.getAttribute('data-phase').catch(() => null);
      if (phase === 'Succeeded' || phase === 'Failed') {
        return phase;
      }
      if (Date.now() > deadline) {
        await s.page.screenshot({ path: path.join(artifacts, `${name}-timeout.png`) });
        assert.fail(`no verdict after ${jobTimeout} ms\n${tail(s.lab.logFile)}`);
      }
      await s.page.waitForTimeout(250);
    }
  };
  return s;
}

module.exports = {
  browserSession,
  PANEL,
  VISIBLE_NB,
  startLab,
  chromiumPath,
  CHROMIUM_ARGS,
  jupyterBin,
  NOTEBOOKS,
  notebook,
  tail,
  REPO
};
