/**
 * The lab's "Validate with options" dialog (issue 12), in headless Chromium
 * against a real `jupyter lab` with the real server extension and the local
 * backend: input the server would refuse is named at its field (the checks'
 * and the server's own 400), and a tolerance and a parameter set in the
 * dialog reach the submitted job and decide its verdict; what the dialog saved
 * for the project is what `run DIR` and `pytest --nbvalidation DIR` read. With
 * NBV_UPDATE_README_SHOT=1 it also refreshes docs/screenshots/validation-panel.png.
 * Run: `node --test ui-tests/options.test.js` from labextension/.
 */
'use strict';

const { describe, test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { browserSession, PANEL, VISIBLE_NB, notebook, REPO, jupyterBin } = require('./lab');

const ARTIFACTS = process.env.NBV_ARTIFACTS || path.join(REPO, 'test-artifacts');
const JOB_TIMEOUT = Number(process.env.NBV_JOB_TIMEOUT_MS || 600_000);
const README_SHOT = path.join(REPO, 'docs', 'screenshots', 'validation-panel.png');

/** A notebook (lab.js's notebook()) with tags on some cells: {index: [tag, ...]}. */
function tagged(text, tags) {
  const nb = JSON.parse(text);
  for (const [i, t] of Object.entries(tags)) {
    nb.cells[Number(i)].metadata.tags = t;
  }
  for (const c of nb.cells) {
    if (c.cell_type === 'code' && c.outputs.length && c.outputs[0].text === '') {
      c.outputs = [];
    }
  }
  return JSON.stringify(nb, null, 1);
}

const FILES = {
  // the Options dialog: a parameter changes the output, only a tolerance lets it match the golden copy
  'options/options.ipynb': tagged(
    notebook([
      ['code', 'scale = 1.0'],
      ['markdown', 'The printed value depends on the parameter.'],
      ['code', 'print(round(3.14159 * scale, 6))']
    ]),
    { 0: ['parameters'] }
  ),
  'options/golden.ipynb': tagged(
    notebook([
      ['code', 'scale = 1.0', ''],
      ['markdown', 'The printed value depends on the parameter.'],
      ['code', 'print(round(3.14159 * scale, 6))', '3.14159\n']
    ]),
    { 0: ['parameters'] }
  )
};

let lab;
let page;
const session = browserSession({
  name: 'options',
  files: FILES,
  artifacts: ARTIFACTS,
  jobTimeout: JOB_TIMEOUT,
  ready: s => {
    ({ lab, page } = s);
  }
});
const { pageErrors, rest, openNotebook, waitForVerdict } = session;

async function shot(name, locator) {
  await page.mouse.move(0, 0);
  await page.waitForTimeout(300);
  await (locator ?? page).screenshot({ path: path.join(ARTIFACTS, name) });
}

describe('the Validate with options dialog', () => {
  test('the Options dialog takes a tolerance and a parameter: refused input is named, the job carries both', async () => {
    await openNotebook('options/options.ipynb');
    await page.locator('.lm-TabBar-tab[data-id="nbvalidation-panel"]').click();
    const dialog = page.locator('.jp-Dialog');
    const jobsOf = async () =>
      (await rest('GET', 'nbvalidation/api/v1/jobs?notebook=options/options.ipynb')).body.items;
    const openOptions = async () => {
      await page.locator(`${PANEL} .jp-NBValidation-options`).click();
      await dialog.waitFor({ timeout: 30_000 });
    };
    const field = key => dialog.locator(`[id$="-${key}"]:is(input, textarea)`);
    const submitAndWaitForJob = async () => {
      const before = (await jobsOf()).map(j => j.metadata.name);
      await dialog.locator('button.jp-mod-accept').click();
      let created = [];
      const deadline = Date.now() + 30_000;
      while (!created.length) {
        assert.ok(Date.now() < deadline, 'no job was submitted');
        await page.waitForTimeout(300);
        created = (await jobsOf()).filter(j => !before.includes(j.metadata.name));
      }
      const name = created[0].metadata.name;
      await page
        .locator(`${PANEL} .jp-NBValidation-detail[aria-label="Job ${name}"]`)
        .waitFor({ timeout: 30_000 });
      return name;
    };

    // 1. input the server would refuse: the dialog comes back with the reason at the field, nothing submitted
    await openOptions();
    await field('golden').fill('golden.ipynb');
    await dialog.locator('input[type="checkbox"][id$="-build"]').uncheck();
    await field('absTolerance').fill('abc');
    await field('parameters').fill('scale=1.001\n1x=2');
    await dialog.locator('button.jp-mod-accept').click();
    const invalid = dialog.locator('.jp-NBValidation-optionRow.jp-mod-invalid');
    await invalid.first().waitFor({ timeout: 30_000 });
    const messages = await invalid.locator('.jp-NBValidation-optionError').allTextContents();
    console.log(`# dialog says: ${messages.join(' | ')}`);
    assert.deepEqual(await invalid.evaluateAll(rows => rows.map(r => r.dataset.field)), [
      'comparisonConfig.floatingPointTolerance',
      'parameters'
    ]);
    // in words: the dialog's field, never the spec path (that stays in data-field)
    assert.match(messages[0], /^Absolute tolerance: "abc" is not a number/);
    assert.match(messages[1], /^Parameters: line 2: "1x" must be a Python identifier/);
    // what was typed is kept
    assert.equal(await field('golden').inputValue(), 'golden.ipynb');
    assert.equal(await field('parameters').inputValue(), 'scale=1.001\n1x=2');
    await shot('ux-options-invalid.png', dialog.locator('.jp-Dialog-content'));
    // the server's own 400 (a golden notebook that does not exist) comes back at its field too
    await field('absTolerance').fill('');
    await field('parameters').fill('scale=1.001');
    await field('golden').fill('missing.ipynb');
    await dialog.locator('button.jp-mod-accept').click();
    const refused = dialog.locator(
      '.jp-NBValidation-optionRow.jp-mod-invalid[data-option="goldenPath"]'
    );
    await refused.waitFor({ timeout: 30_000 });
    const serverMessage = await refused.locator('.jp-NBValidation-optionError').textContent();
    console.log(`# server refused: ${serverMessage}`);
    assert.equal(
      serverMessage,
      'Golden notebook: The golden notebook missing.ipynb was not found next to options.ipynb ' +
        '(options/). Check its name in Options…, or create it there.'
    );
    assert.deepEqual(await jobsOf(), [], 'a refused dialog submitted a job');

    // 2. the parameter alone: its output (3.144732) differs from the golden 3.14159 by more than 1e-4
    await field('golden').fill('golden.ipynb');
    const failing = await submitAndWaitForJob();
    assert.equal(await waitForVerdict(), 'Failed');
    const diff = page.locator(`${PANEL} .jp-NBValidation-diff`);
    await diff.first().waitFor({ timeout: 60_000 });
    assert.match(await diff.locator('.jp-NBValidation-diffHead').textContent(), /^Cell 3\b/);
    const tolerance = page.locator(`${PANEL} .jp-NBValidation-tolerance`);
    assert.match(await tolerance.textContent(), /Tolerance: absolute 0\.0001, relative 0/);
    let job = (await rest('GET', `nbvalidation/api/v1/jobs/${failing}`)).body;
    assert.deepEqual(job.spec.parameters, { scale: 1.001 });
    assert.equal(job.spec.comparisonConfig, undefined);
    const shotFile = path.join(ARTIFACTS, 'ux-options-golden-diff.png');
    await shot('ux-options-golden-diff.png');
    await shot('ux-options-golden-diff-panel.png', page.locator(PANEL));
    if (process.env.NBV_UPDATE_README_SHOT === '1') {
      // only on request: a test run leaves the checkout as it found it
      fs.mkdirSync(path.dirname(README_SHOT), { recursive: true });
      fs.copyFileSync(shotFile, README_SHOT);
    }

    // 3. the same parameter with an absolute tolerance of 0.01: the golden copy matches
    await openOptions();
    await field('golden').fill('golden.ipynb');
    await dialog.locator('input[type="checkbox"][id$="-build"]').uncheck();
    await field('absTolerance').fill('0.01');
    await field('cellTimeout').fill('120');
    await field('parameters').fill('scale=1.001');
    const passing = await submitAndWaitForJob();
    assert.equal(await waitForVerdict(), 'Succeeded');
    job = (await rest('GET', `nbvalidation/api/v1/jobs/${passing}`)).body;
    assert.deepEqual(job.spec.parameters, { scale: 1.001 });
    assert.deepEqual(job.spec.comparisonConfig, { floatingPointTolerance: 0.01 });
    assert.equal(job.spec.cellTimeout, '120s');
    assert.deepEqual(job.status.comparisonResult.tolerance, { absolute: 0.01, relative: 0 });
    assert.equal(
      await page.locator(`${PANEL} .jp-NBValidation-comparisonResult`).getAttribute('data-result'),
      'matched'
    );
    assert.match(await tolerance.textContent(), /Tolerance: absolute 0\.01, relative 0/);
    // the parameter reached the kernel: the executed notebook printed the scaled value
    const executed = await rest('GET', `nbvalidation/api/v1/jobs/${passing}/notebook`);
    assert.equal(executed.status, 200);
    assert.match(JSON.stringify(executed.body), /3\.144732/);

    // 4. lab to CI (issue 42): what the dialog saved for the project ("Save for this project", the
    // default) is what `jupyter nbvalidation run DIR` and `pytest --nbvalidation DIR` read on the same
    // folder: the same pair compared with the same tolerance, and the golden copy never validated
    const saved = await rest(
      'GET',
      'nbvalidation/api/v1/project-settings?notebook=options/options.ipynb'
    );
    assert.equal(saved.status, 200, JSON.stringify(saved.body));
    assert.equal(saved.body.exists, true, 'the dialog saved nothing for the project');
    console.log(`# saved in ${saved.body.file}: ${JSON.stringify(saved.body.entry)}`);
    assert.deepEqual(saved.body.entry.goldenNotebook, { path: 'golden.ipynb' });
    assert.deepEqual(saved.body.entry.comparisonConfig, { floatingPointTolerance: 0.01 });
    assert.deepEqual(saved.body.entry.parameters, { scale: 1.001 });
    const folder = path.join(lab.root, 'options');
    const bin = path.dirname(jupyterBin());
    const ci = (exe, args, env = {}) => {
      const proc = spawnSync(path.join(bin, exe), args, {
        cwd: lab.tmp,
        encoding: 'utf8',
        timeout: JOB_TIMEOUT,
        env: { ...process.env, ...env }
      });
      const out = `${proc.stdout}\n${proc.stderr}`;
      console.log(`# ${exe} ${args.join(' ')} -> ${proc.status}\n${out.slice(-1500)}`);
      return { status: proc.status, out };
    };
    const data = path.join(lab.tmp, 'ci-data');
    const junit = path.join(lab.tmp, 'run.xml');
    const run = ci('jupyter', [
      'nbvalidation',
      'run',
      folder,
      '--local',
      '--data-dir',
      data,
      '--junitxml',
      junit
    ]);
    assert.equal(run.status, 0, 'run DIR did not pass with the saved tolerance');
    const cases = [
      ...fs.readFileSync(junit, 'utf8').matchAll(/<testcase [^>]*name="([^"]+)"/g)
    ].map(m => m[1]);
    assert.deepEqual(
      cases.map(c => path.basename(c)),
      ['options.ipynb'],
      `run DIR validated ${cases}`
    );
    fs.writeFileSync(path.join(lab.tmp, 'pytest.ini'), '[pytest]\n');
    const pytest = ci(
      'python',
      [
        '-m',
        'pytest',
        '-p',
        'jupyter_nbvalidation.pytest_plugin',
        '-p',
        'no:cacheprovider',
        '-c',
        path.join(lab.tmp, 'pytest.ini'),
        '--rootdir',
        folder,
        '--nbvalidation',
        '--nbvalidation-local',
        '--nbvalidation-no-cache',
        '--nbvalidation-data-dir',
        data,
        '-v',
        folder
      ],
      { PYTEST_DISABLE_PLUGIN_AUTOLOAD: '1' }
    );
    assert.equal(pytest.status, 0, 'pytest --nbvalidation did not pass with the saved tolerance');
    assert.match(pytest.out, /options\.ipynb\S* PASSED/);
    assert.doesNotMatch(
      pytest.out,
      /golden\.ipynb\S* (PASSED|FAILED)/,
      'pytest validated the golden copy'
    );
    assert.match(pytest.out, /\b1 passed\b/);
  });

  test('no page errors', () => {
    assert.deepEqual(pageErrors, []);
  });
});
