/**
 * The panel reads at a glance (issue 42), measured in headless Chromium against a real
 * `jupyter lab` with the real server extension and the local backend, in the light and the dark
 * theme: at 1440×900 with the default panel width the failing cell's first line and the golden
 * diff are within the first screen of the panel; a finished job's build log is collapsed; at a
 * panel width of 280 px no control is clipped (every button, input and label lies inside the
 * panel and shows its whole text); the rendered text holds no reason code, spec path or data-dir
 * path; two differing cells, Accept all as golden, Validate again → green. Screenshots of each
 * state go to test-artifacts/ (NBV_UPDATE_DOCS_SHOTS=1 also copies them into
 * docs/screenshots/lab/, the "In JupyterLab" page's pictures).
 * Run: `node --test ui-tests/layout.test.js` from labextension/.
 */
'use strict';

const { describe, test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { browserSession, PANEL, notebook, REPO } = require('./lab');

const ARTIFACTS = process.env.NBV_ARTIFACTS || path.join(REPO, 'test-artifacts');
const JOB_TIMEOUT = Number(process.env.NBV_JOB_TIMEOUT_MS || 600_000);

/** The server's codes a person must never read: CamelCase reasons and phases, diff kinds. */
function codes() {
  const vocab = fs.readFileSync(path.join(__dirname, '..', 'src', 'vocabulary.ts'), 'utf8');
  const words = new Set();
  for (const m of vocab.matchAll(/'([A-Za-z]+)'/g)) {
    if (/[a-z][A-Z]/.test(m[1])) {
      words.add(m[1]);
    }
  }
  for (const c of ['output_mismatch', 'missing_cell', 'extra_cell', '(major)', '(minor)']) {
    words.add(c);
  }
  return [...words];
}
const CODES = codes();
const SPEC_PATHS = [
  /\bspec\.[a-zA-Z]/,
  /goldenNotebook/,
  /comparisonConfig/,
  /podConfig/,
  /floatingPointTolerance/,
  /ignoreOutputTypes/
];

// a long line: the traceback and the code scroll sideways, never wrap
const LONG = 'value_with_a_rather_long_name_' + 'x'.repeat(60);
const FILES = {
  'layout/failing.ipynb': notebook([
    ['markdown', '# Sums'],
    ['code', `${LONG} = 1\nprint(${LONG})`],
    [
      'code',
      `result = ${LONG} / 0  # this line is long enough to need a sideways scroll in a side panel`
    ]
  ]),
  'twocells/current.ipynb': notebook([
    ['code', 'print("same")'],
    ['code', 'import math\nprint(round(math.pi * 1000, 6))'],
    ['code', 'print("total", 6 * 7)']
  ]),
  'twocells/golden.ipynb': notebook([
    ['code', 'print("same")', 'same\n'],
    ['code', 'import math\nprint(round(math.pi * 1000, 6))', '3141.5\n'],
    ['code', 'print("total", 6 * 7)', 'total 41\n']
  ])
};

let lab;
let page;
const session = browserSession({
  name: 'layout',
  files: FILES,
  artifacts: ARTIFACTS,
  jobTimeout: JOB_TIMEOUT,
  ready: s => {
    ({ lab, page } = s);
  }
});
const { pageErrors, rest, openNotebook, waitForVerdict, setTheme, panelShot: shot } = session;

async function openPanel() {
  await page.locator('.lm-TabBar-tab[data-id="nbvalidation-panel"]').click();
  await page.locator(PANEL).waitFor({ state: 'visible', timeout: 30_000 });
}

/** Open the notebook, show the panel on its newest job, and wait for its verdict. */
async function showVerdictOf(rel) {
  const button = await openNotebook(rel);
  await openPanel();
  await page.locator(`${PANEL} .jp-NBValidation-verdict`).waitFor({ timeout: 30_000 });
  return { button, phase: await waitForVerdict() };
}

/** Where `selector`'s first line is, against the first screen of the panel (scrolled to the top). */
async function inFirstScreen(selector) {
  return page.evaluate(
    ([panelSel, sel]) => {
      const panel = document.querySelector(panelSel);
      panel.scrollTop = 0;
      const el = panel.querySelector(sel);
      if (!el) {
        return { found: false };
      }
      const p = panel.getBoundingClientRect();
      const r = el.getBoundingClientRect();
      const line = parseFloat(getComputedStyle(el).lineHeight) || 18;
      const bottom = Math.min(p.top + panel.clientHeight, window.innerHeight);
      return {
        found: true,
        firstLineBottom: Math.round(r.top + Math.min(r.height, line + 8)),
        screenBottom: Math.round(bottom),
        ok: r.top >= p.top - 1 && r.top + Math.min(r.height, line + 8) <= bottom + 1
      };
    },
    [PANEL, selector]
  );
}

/** Drag the right sidebar's split handle so the panel is `width` px wide; its width after. */
async function resizePanel(width) {
  const handle = await page.evaluate(panelSel => {
    const panel = document.querySelector(panelSel).getBoundingClientRect();
    let best = null;
    for (const h of document.querySelectorAll('.lm-SplitPanel-handle')) {
      const r = h.getBoundingClientRect();
      if (r.width > 0 && r.height > 200 && r.right <= panel.left + 2) {
        if (!best || r.right > best.right) {
          best = { x: r.left + r.width / 2, y: r.top + r.height / 2, right: r.right };
        }
      }
    }
    return best && { ...best, panelRight: panel.right };
  }, PANEL);
  assert.ok(handle, 'no split handle left of the panel');
  await page.mouse.move(handle.x, handle.y);
  await page.mouse.down();
  await page.mouse.move(handle.panelRight - width - 1, handle.y, { steps: 8 });
  await page.mouse.up();
  await page.waitForTimeout(400);
  return page.locator(PANEL).evaluate(n => n.getBoundingClientRect().width);
}

/** Every control and label of the panel that is cut off: outside the panel, or its text clipped. */
async function clippedControls() {
  return page.evaluate(panelSel => {
    const panel = document.querySelector(panelSel);
    const p = panel.getBoundingClientRect();
    const left = p.left;
    const right = p.left + panel.clientWidth; // inside its own scrollbar
    const bad = [];
    const sel = 'button, input, select, textarea, a, summary, label, .jp-NBValidation-badge';
    for (const el of panel.querySelectorAll(sel)) {
      const r = el.getBoundingClientRect();
      if (!r.width || !r.height || el.closest('details:not([open]) > :not(summary)')) {
        continue; // not shown
      }
      const what = `${el.tagName.toLowerCase()}.${[...el.classList].join('.')} "${(el.textContent || el.value || '').trim().slice(0, 40)}"`;
      if (r.left < left - 0.5 || r.right > right + 0.5) {
        bad.push(
          `${what} lies outside the panel (${Math.round(r.left)}–${Math.round(r.right)} vs ${Math.round(left)}–${Math.round(right)})`
        );
      }
      if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1) {
        bad.push(
          `${what} is clipped (scrollWidth ${el.scrollWidth} > clientWidth ${el.clientWidth})`
        );
      }
    }
    if (panel.scrollWidth > panel.clientWidth + 1) {
      bad.push(`the panel scrolls sideways (${panel.scrollWidth} > ${panel.clientWidth})`);
    }
    return bad;
  }, PANEL);
}

/** What a person can read in the panel and the status bar (collapsed sections included). */
async function readableText() {
  return page.evaluate(panelSel => {
    const panel = document.querySelector(panelSel);
    const titles = [...panel.querySelectorAll('[title]')].map(n => n.getAttribute('title'));
    const status = document.querySelector('.jp-NBValidation-statusButton');
    return [
      panel.textContent,
      ...titles,
      status ? status.textContent : '',
      status ? status.getAttribute('title') || '' : ''
    ].join('\n');
  }, PANEL);
}

function forbiddenIn(text) {
  const found = [];
  for (const c of CODES) {
    if (new RegExp(`(^|[^A-Za-z])${c.replace(/[()]/g, '\\$&')}($|[^A-Za-z])`).test(text)) {
      found.push(`reason code ${c}`);
    }
  }
  for (const re of SPEC_PATHS) {
    if (re.test(text)) {
      found.push(`spec path ${re}`);
    }
  }
  const dataDir = path.join(lab.tmp, 'data');
  if (text.includes(dataDir) || text.includes(lab.tmp)) {
    found.push(`data-dir path ${dataDir}`);
  }
  return found;
}

const seenText = [];

/** The measurements of one finished state, in the current theme. */
async function measure(state, theme, { first = [], buildLogCollapsed = false } = {}) {
  // at 1440×900, the default panel width: what matters is in the first screen
  for (const sel of first) {
    const where = await inFirstScreen(sel);
    console.log(`# ${theme} ${state}: ${sel} ${JSON.stringify(where)}`);
    assert.ok(where.found, `${state} (${theme}): ${sel} is not shown`);
    assert.ok(
      where.ok,
      `${state} (${theme}): ${sel} is below the first screen ${JSON.stringify(where)}`
    );
  }
  if (buildLogCollapsed) {
    const log = page.locator(`${PANEL} .jp-NBValidation-buildLog`);
    await log.waitFor({ timeout: 30_000 });
    assert.equal(
      await log.evaluate(n => n.open),
      false,
      `${state} (${theme}): the build log is open`
    );
  }
  const events = page.locator(`${PANEL} .jp-NBValidation-eventsSection`);
  if (await events.count()) {
    assert.equal(
      await events.evaluate(n => n.open),
      false,
      `${state} (${theme}): the events are open`
    );
  }
  await shot(`lab-${state}-${theme}.png`, true);
  const text = await readableText();
  seenText.push(text);
  assert.deepEqual(forbiddenIn(text), [], `${state} (${theme}) shows internal words`);
  // no control cut off at 280 px
  const width = await resizePanel(280);
  console.log(`# ${theme} ${state}: panel width ${width}px`);
  assert.ok(width >= 270 && width <= 300, `the panel is ${width}px wide, not about 280`);
  assert.deepEqual(await clippedControls(), [], `${state} (${theme}) at 280 px`);
  await shot(`lab-${state}-${theme}-280px.png`);
}

describe('the panel reads at a glance, in light and dark', () => {
  test('a failing notebook: the failing cell first; feedback while it starts; log collapsed after', async () => {
    await setTheme('JupyterLab Light');
    const button = await openNotebook('layout/failing.ipynb');
    await openPanel();
    await button.click();
    // feedback at every step, and one clock: the status bar says what the panel says
    const seen = new Set();
    const deadline = Date.now() + JOB_TIMEOUT;
    const sample = () =>
      page.evaluate(panelSel => {
        const t = sel => document.querySelector(sel)?.textContent.trim() ?? null;
        return {
          phase: document
            .querySelector(`${panelSel} .jp-NBValidation-verdict`)
            ?.getAttribute('data-phase'),
          progress: t(`${panelSel} .jp-NBValidation-progressText`),
          bar: t('.jp-NBValidation-statusButton')
        };
      }, PANEL);
    for (;;) {
      assert.ok(Date.now() < deadline, 'no verdict');
      const now = await sample();
      if (now.phase === 'Succeeded' || now.phase === 'Failed') {
        break;
      }
      if (now.progress) {
        seen.add(now.progress.replace(/\d+ s$/, 'N s'));
        if (
          now.bar &&
          now.bar.startsWith('Validating: ') &&
          now.bar !== `Validating: ${now.progress}`
        ) {
          // the panel and the status bar render the same state in frames of their own: on a
          // loaded machine one may show a change a frame before the other; two clocks stay apart
          await page.waitForTimeout(500);
          const again = await sample();
          if (
            again.progress === now.progress &&
            again.bar &&
            again.bar.startsWith('Validating: ')
          ) {
            assert.equal(again.bar, `Validating: ${again.progress}`, 'two clocks');
          }
        }
      }
      await page.waitForTimeout(200);
    }
    console.log(`# live texts: ${[...seen].join(' | ')}`);
    assert.equal(await waitForVerdict(), 'Failed');
    await page.locator(`${PANEL} .jp-NBValidation-failure`).waitFor({ timeout: 60_000 });
    const frame = page.locator(`${PANEL} .jp-NBValidation-frame.jp-mod-cell`).first();
    assert.equal(await frame.evaluate(n => getComputedStyle(n).whiteSpace), 'pre');
    assert.ok(
      await frame.evaluate(n => n.scrollWidth > n.clientWidth),
      'the long line does not scroll sideways'
    );
    assert.match(
      await page.locator(`${PANEL} .jp-NBValidation-sentence`).textContent(),
      /^Cell 3 raised ZeroDivisionError; /
    );
    // the job list: "✗ just now", its name a tooltip, shown once in the detail
    const row = page.locator(`${PANEL} .jp-NBValidation-job`).first();
    assert.match((await row.textContent()).trim(), /^✗\s*(just now|\d+ min ago)$/);
    const name = (await page.locator(`${PANEL} .jp-NBValidation-jobFullName`).textContent()).trim();
    assert.match(await row.getAttribute('title'), new RegExp(`^${name}`));
    assert.equal(
      await page.locator(PANEL).evaluate((n, nm) => n.textContent.split(nm).length - 1, name),
      1,
      'the job name is shown more than once'
    );
    await measure('failing', 'light', {
      first: [
        '.jp-NBValidation-failureHead',
        '.jp-NBValidation-errorLine',
        '.jp-NBValidation-frame.jp-mod-cell'
      ],
      buildLogCollapsed: true
    });
    // the executed notebook's tab names the job
    await openNotebook('layout/failing.ipynb');
    await openPanel();
    await page.locator(`${PANEL} .jp-NBValidation-openExecuted`).click();
    const tab = page.locator('.lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current');
    await page.waitForFunction(
      () =>
        /validated/.test(
          document.querySelector('.lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current')
            ?.textContent ?? ''
        ),
      null,
      { timeout: 30_000 }
    );
    assert.match((await tab.textContent()).trim(), /^failing\.ipynb — validated \d\d:\d\d$/);
  });

  test('two differing cells: the diff first, stacked; Accept all as golden; Validate again → green', async () => {
    await openNotebook('twocells/current.ipynb');
    await openPanel();
    await page.locator(`${PANEL} .jp-NBValidation-options`).click();
    const dialog = page.locator('.jp-Dialog');
    await dialog.waitFor({ timeout: 30_000 });
    // the dialog fits, or shows that it scrolls; its buttons are on screen
    const fit = await dialog.locator('.jp-NBValidation-optionsForm').evaluate(n => ({
      scrolls: n.scrollHeight > n.clientHeight + 1,
      cue: n.classList.contains('jp-mod-moreBelow')
    }));
    assert.ok(
      !fit.scrolls || fit.cue,
      `the dialog scrolls without saying so ${JSON.stringify(fit)}`
    );
    const accept = await dialog.locator('button.jp-mod-accept').boundingBox();
    assert.ok(accept && accept.y + accept.height <= 900, 'the Validate button is off screen');
    const file = dialog.locator('.jp-NBValidation-settingsFile');
    const project = (await file.count()) > 0;
    console.log(
      `# project settings route: ${project ? (await file.textContent()).trim() : 'missing (browser fallback)'}`
    );
    if (project) {
      assert.equal(await dialog.locator('input[type="radio"][value="project"]').isChecked(), true);
    }
    await dialog.locator('input[id$="-golden"]').fill('golden.ipynb');
    await dialog.locator('input[type="checkbox"][id$="-build"]').uncheck();
    const dialogText = await dialog.textContent();
    assert.deepEqual(forbiddenIn(dialogText), [], 'the Options dialog shows internal words');
    await page.screenshot({ path: path.join(ARTIFACTS, 'lab-options-dialog-light.png') });
    await dialog.locator('button.jp-mod-accept').click();
    await dialog.waitFor({ state: 'detached', timeout: 30_000 });
    await page.waitForTimeout(500);
    assert.equal(await waitForVerdict(), 'Failed');
    if (project) {
      // saved for the project: the notebook's own entry in the settings file (contract42)
      const saved = await rest(
        'GET',
        'nbvalidation/api/v1/project-settings?notebook=twocells/current.ipynb'
      );
      assert.equal(saved.status, 200, JSON.stringify(saved.body));
      assert.equal(saved.body.exists, true);
      assert.deepEqual(saved.body.entry.goldenNotebook, { path: 'golden.ipynb' });
      console.log(`# saved in ${saved.body.file}: ${JSON.stringify(saved.body.entry)}`);
    }
    const diffs = page.locator(`${PANEL} .jp-NBValidation-diff`);
    await diffs.first().waitFor({ timeout: 60_000 });
    assert.equal(await diffs.count(), 2);
    // Expected above Actual, the unified diff open
    const [e, a] = await Promise.all([
      diffs.first().locator('.jp-NBValidation-expected').boundingBox(),
      diffs.first().locator('.jp-NBValidation-actual').boundingBox()
    ]);
    assert.ok(a.y >= e.y + e.height - 1, 'Expected and Actual are side by side');
    assert.equal(
      await diffs
        .first()
        .locator('details.jp-NBValidation-unifiedSection')
        .evaluate(n => n.open),
      true
    );
    // Find the cause only where there is something to search (no earlier success here)
    assert.equal(await page.locator(`${PANEL} .jp-NBValidation-findCause`).count(), 0);
    await measure('golden-diff', 'light', {
      first: ['.jp-NBValidation-diffHead', '.jp-NBValidation-diff pre']
    });
    // Accept all, then the plain Validate: the next run matches
    await openNotebook('twocells/current.ipynb');
    await openPanel();
    await page.locator(`${PANEL} .jp-NBValidation-acceptAll`).click();
    const confirm = page.locator('.jp-Dialog');
    await confirm.waitFor({ timeout: 30_000 });
    assert.match(await confirm.textContent(), /Accept all as golden\?/);
    await confirm.locator('button.jp-mod-warn').click();
    await page.locator(`${PANEL} .jp-NBValidation-accepted`).nth(1).waitFor({ timeout: 60_000 });
    const golden = (await rest('GET', 'api/contents/twocells/golden.ipynb?content=1')).body.content;
    assert.equal(golden.cells[1].outputs[0].text, '3141.592654\n');
    assert.equal(golden.cells[2].outputs[0].text, 'total 42\n');
    const before = (
      await page.locator(`${PANEL} .jp-NBValidation-jobFullName`).textContent()
    ).trim();
    await page.locator(`${PANEL} .jp-NBValidation-validate`).click();
    await page.waitForFunction(
      old =>
        (document
          .querySelector('#nbvalidation-panel .jp-NBValidation-jobFullName')
          ?.textContent.trim() ?? old) !== old,
      before,
      { timeout: 30_000 }
    );
    assert.equal(await waitForVerdict(), 'Succeeded');
    assert.equal(
      await page.locator(`${PANEL} .jp-NBValidation-comparisonResult`).getAttribute('data-result'),
      'matched'
    );
    await measure('golden-accepted', 'light');
  });

  test('a reused environment says when it was built instead of replaying an old log', async () => {
    const button = await openNotebook('passing/passing.ipynb');
    await openPanel();
    await button.click();
    assert.equal(await waitForVerdict(), 'Succeeded');
    const env = page.locator(`${PANEL} .jp-NBValidation-reused`);
    await env.waitFor({ timeout: 30_000 });
    assert.match(await env.textContent(), /reused \(built (just now|\d+ min ago)\)/);
    assert.equal(await page.locator(`${PANEL} .jp-NBValidation-buildLog`).count(), 0);
    await measure('succeeded', 'light');
  });

  test('the same states in the dark theme', async () => {
    await setTheme('JupyterLab Dark');
    const states = [
      [
        'layout/failing.ipynb',
        'failing',
        [
          '.jp-NBValidation-failureHead',
          '.jp-NBValidation-errorLine',
          '.jp-NBValidation-frame.jp-mod-cell'
        ],
        true
      ],
      ['passing/passing.ipynb', 'succeeded', [], false],
      ['twocells/current.ipynb', 'golden-accepted', [], false]
    ];
    for (const [rel, state, first, buildLogCollapsed] of states) {
      await showVerdictOf(rel);
      assert.equal(await page.evaluate(() => document.body.dataset.jpThemeLight), 'false');
      await measure(state, 'dark', { first, buildLogCollapsed });
    }
    // the golden diff in the dark: the failed job of twocells is the older one; show it
    await openNotebook('twocells/current.ipynb');
    await openPanel();
    await page.locator(`${PANEL} .jp-NBValidation-job`).nth(1).click();
    await page.locator(`${PANEL} .jp-NBValidation-diff`).first().waitFor({ timeout: 30_000 });
    await measure('golden-diff', 'dark', {
      first: ['.jp-NBValidation-diffHead', '.jp-NBValidation-diff pre']
    });
  });

  test('the verdict badge is readable on a selected row of the file browser', async () => {
    await page.goto(`${lab.base}lab/tree/layout?token=${lab.token}`);
    const item = page.locator('#filebrowser .jp-DirListing-item[title^="Name: failing.ipynb"]');
    await item.waitFor({ timeout: 60_000 });
    await item.click();
    const badge = item.locator('.jp-NBValidation-fbBadge');
    await badge.waitFor({ state: 'attached', timeout: 60_000 });
    const colours = await badge.evaluate(n => {
      const row = n.closest('.jp-DirListing-item');
      return {
        selected: row.classList.contains('jp-mod-selected'),
        badge: getComputedStyle(n).backgroundColor,
        row: getComputedStyle(row).backgroundColor
      };
    });
    assert.ok(colours.selected);
    assert.notEqual(colours.badge, colours.row, 'the badge sits on the selection colour');
  });

  test('no page errors', () => {
    assert.ok(seenText.length >= 7, 'not every state was read');
    assert.deepEqual(pageErrors, []);
  });
});
