/**
 * The panel's Schedules tab (issue 45), in headless Chromium against a real `jupyter lab` with
 * the real server extension and the local backend, its cron expressions taking the test-only
 * seconds field (`c.NBValidation.schedule_seconds_field`): a schedule created over REST runs a
 * notebook of the lab's root every two seconds, passes, then fails once the notebook is broken;
 * the tab shows its strip with the phases the REST API gives, oldest first; Pause makes
 * `spec.suspend` true (read over REST); a click on a mark opens that run's verdict in the job
 * view, though its notebook is not open; Run now while a run goes is a short note (409);
 * keyboard, light and dark themes. Screenshots go to test-artifacts/ (NBV_UPDATE_DOCS_SHOTS=1
 * also copies them into docs/screenshots/lab/).
 * Run: `node --test ui-tests/schedules.test.js` from labextension/.
 */
'use strict';

const { describe, test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { browserSession, PANEL, notebook, REPO, tail } = require('./lab');

const ARTIFACTS = process.env.NBV_ARTIFACTS || path.join(REPO, 'test-artifacts');
const JOB_TIMEOUT = Number(process.env.NBV_JOB_TIMEOUT_MS || 180_000);
const API = 'nbvalidation/api/v1';
const NAME = 'nightly';
const NOTEBOOK = 'sched/sched.ipynb';

const PASSING = notebook([
  ['markdown', '# Validated on a schedule'],
  ['code', 'print(6 * 7)']
]);
// the run takes a few seconds: a Run now meanwhile finds it still going
const FAILING = notebook([
  ['code', 'import time\ntime.sleep(3)'],
  ['code', '1/0']
]);

let lab;
let page;
const session = browserSession({
  name: 'schedules',
  files: { [NOTEBOOK]: PASSING },
  artifacts: ARTIFACTS,
  jobTimeout: JOB_TIMEOUT,
  serverConfig: { NBValidation: { schedule_seconds_field: true } },
  ready: s => {
    ({ lab, page } = s);
  }
});
const { pageErrors, rest, setTheme, panelShot: shot } = session;

const TAB = name => `${PANEL} .jp-NBValidation-tab[data-view="${name}"]`;
const ROW = `${PANEL} .jp-NBValidation-schedule[data-schedule="${NAME}"]`;

/** The lab with no notebook open, and the panel shown. */
async function openLabAndPanel() {
  await page.goto(`${lab.base}lab?reset&token=${lab.token}`);
  await page.waitForSelector('#jp-main-dock-panel', { timeout: 60_000 });
  await page.locator('.lm-TabBar-tab[data-id="nbvalidation-panel"]').click();
  await page.locator(PANEL).waitFor({ state: 'visible', timeout: 30_000 });
}

async function schedule() {
  const r = await rest('GET', `${API}/schedules/${NAME}`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

/** Wait (over REST) until `check(schedule)` holds; returns the schedule. */
async function until(what, check, timeoutMs = JOB_TIMEOUT) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const s = await schedule();
    if (check(s)) {
      return s;
    }
    if (Date.now() > deadline) {
      await page.screenshot({ path: path.join(ARTIFACTS, 'schedules-timeout.png') });
      assert.fail(
        `${what}: not after ${timeoutMs} ms; status ${JSON.stringify(s.status)}\n${tail(lab.logFile)}`
      );
    }
    await new Promise(r => setTimeout(r, 300));
  }
}

const finished = (s, phase) =>
  (s.status.recent ?? []).find(r => r.finished && r.phase === phase) ?? null;

/** The strip the tab shows: [{job, verdict, title}], left to right. */
async function shownStrip() {
  return page.locator(`${ROW} .jp-NBValidation-mark`).evaluateAll(marks =>
    marks.map(m => ({
      job: m.getAttribute('data-job'),
      verdict: m.getAttribute('data-verdict'),
      title: m.getAttribute('title')
    }))
  );
}

/** status.recent (newest first) as the strip should read it: oldest first, a verdict each. */
function expectedStrip(s) {
  const verdict = r =>
    r.phase === 'Succeeded'
      ? 'succeeded'
      : r.phase !== 'Failed'
        ? 'running'
        : r.reason === 'InfrastructureFailed'
          ? 'infrastructure'
          : r.reason === 'Cancelled'
            ? 'cancelled'
            : 'failed';
  return [...s.status.recent].reverse().map(r => ({ job: r.job, verdict: verdict(r) }));
}

describe('the Schedules tab', () => {
  test('without a schedule, the tab says how to create one', async () => {
    await openLabAndPanel();
    await page.locator(TAB('schedules')).click();
    const empty = page.locator(`${PANEL} .jp-NBValidation-schedulesEmpty`);
    await empty.waitFor({ timeout: 30_000 });
    assert.match(await empty.innerText(), /jupyter nbvalidation schedule create/);
    assert.equal(await page.locator(TAB('schedules')).getAttribute('aria-selected'), 'true');
    await shot('lab-schedules-empty-light.png');
  });

  test('a schedule passes, then fails: the strip shows its runs, Pause pauses it, a mark opens its run', async () => {
    const created = await rest('POST', `${API}/schedules`, {
      apiVersion: 'nbvalidation.dev/v1alpha1',
      kind: 'NotebookValidationSchedule',
      metadata: { name: NAME },
      spec: {
        schedule: '*/2 * * * * *',
        jobTemplate: {
          spec: { notebook: { path: NOTEBOOK }, podConfig: { buildConfig: { enabled: false } } }
        }
      }
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));

    // the cron runs it: a success, then (the notebook broken on disk) a failure
    const passed = await until('a run succeeded', s => !!finished(s, 'Succeeded'));
    fs.writeFileSync(path.join(lab.root, NOTEBOOK), FAILING);
    await until('a run failed after the notebook broke', s => {
      const failed = finished(s, 'Failed');
      return (
        !!failed &&
        s.status.recent.indexOf(failed) < s.status.recent.indexOf(finished(s, 'Succeeded'))
      );
    });

    // the tab (re-read while shown): the row, its cron and its strip
    await page.locator(TAB('jobs')).click();
    await page.locator(TAB('schedules')).click();
    const row = page.locator(ROW);
    await row.waitFor({ timeout: 30_000 });
    assert.match(await row.locator('.jp-NBValidation-cron').innerText(), /\*\/2 \* \* \* \* \*/);
    assert.match(await row.locator('.jp-NBValidation-nextRun').innerText(), /next \d{4}-\d\d-\d\d/);

    // Pause (the button) makes spec.suspend true, as the REST API says
    await row.locator('.jp-NBValidation-pause').click();
    await until('paused', s => s.spec.suspend === true, 15_000);
    await row
      .locator('.jp-NBValidation-scheduleState[data-state="Paused"]')
      .waitFor({ timeout: 15_000 });
    assert.equal(await row.locator('.jp-NBValidation-pause').innerText(), 'Resume');
    const ended = await until('its last run ended', s => !s.status.active, JOB_TIMEOUT);
    // paused: no tick runs any more (a tick's period later, the same newest run, none going)
    await page.waitForTimeout(2500);
    const stable = await schedule();
    assert.equal(stable.status.active, null, JSON.stringify(stable.status));
    assert.equal(stable.status.recent[0].job, ended.status.recent[0].job);

    // the strip: one mark per run, oldest first, with the phases the REST API gives
    const want = expectedStrip(stable);
    let shown = [];
    const deadline = Date.now() + 30_000;
    for (;;) {
      shown = await shownStrip();
      const same = JSON.stringify(shown.map(({ job, verdict }) => ({ job, verdict })));
      if (same === JSON.stringify(want) || Date.now() > deadline) {
        break;
      }
      await page.waitForTimeout(300);
    }
    assert.deepEqual(
      shown.map(({ job, verdict }) => ({ job, verdict })),
      want
    );
    assert.ok(
      want.some(m => m.verdict === 'succeeded') && want.some(m => m.verdict === 'failed'),
      JSON.stringify(want)
    );
    console.log(
      `# strip ${want.map(m => (m.verdict === 'succeeded' ? '✓' : m.verdict === 'failed' ? '✗' : '?')).join('')}`
    );
    // the theme's colours: a success green, a failure red (not the same)
    const colours = await page
      .locator(`${ROW} .jp-NBValidation-mark`)
      .evaluateAll(marks =>
        marks.map(m => [m.getAttribute('data-verdict'), getComputedStyle(m).backgroundColor])
      );
    const ok = colours.find(([v]) => v === 'succeeded')[1];
    const bad = colours.find(([v]) => v === 'failed')[1];
    assert.notEqual(ok, bad);
    // the title: job, verdict in words, finished time (no reason code)
    const failedMark = [...shown].reverse().find(m => m.verdict === 'failed');
    assert.match(
      failedMark.title,
      new RegExp(
        `^${failedMark.job}\nFailed: validation failed\nfinished \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d UTC$`
      )
    );
    const text = await page.locator(PANEL).innerText();
    assert.doesNotMatch(text, /ValidationFailed|ValidationSucceeded|InfrastructureFailed/);
    await shot('lab-schedules-light.png', true);

    // a click on the newest failed mark: the job view, that run's verdict (its notebook is not open)
    await row.locator(`.jp-NBValidation-mark[data-job="${failedMark.job}"]`).click();
    await page.locator(`${TAB('jobs')}[aria-selected="true"]`).waitFor({ timeout: 15_000 });
    const detail = page.locator(
      `${PANEL} .jp-NBValidation-detail[aria-label="Job ${failedMark.job}"]`
    );
    await detail.waitFor({ timeout: 30_000 });
    const verdict = detail.locator('.jp-NBValidation-verdict');
    await page.waitForFunction(
      sel => document.querySelector(sel)?.getAttribute('data-verdict') === 'failed',
      `${PANEL} .jp-NBValidation-detail[aria-label="Job ${failedMark.job}"] .jp-NBValidation-verdict`,
      { timeout: 30_000 }
    );
    assert.equal(await verdict.getAttribute('data-phase'), 'Failed');
    assert.match(await detail.innerText(), /ZeroDivisionError/);
    await page
      .locator(`${PANEL} .jp-NBValidation-job.jp-mod-selected[data-job="${failedMark.job}"]`)
      .waitFor({ timeout: 15_000 });
    await shot('lab-schedules-opened-run-light.png');

    // and a succeeded one
    await page.locator(TAB('schedules')).click();
    const okJob = passed.status.recent.find(r => r.phase === 'Succeeded').job;
    await page.locator(`${ROW} .jp-NBValidation-mark[data-job="${okJob}"]`).click();
    await page
      .locator(
        `${PANEL} .jp-NBValidation-detail[aria-label="Job ${okJob}"] .jp-NBValidation-verdict[data-phase="Succeeded"]`
      )
      .waitFor({ timeout: 30_000 });
  });

  test('Run now starts a run; Run now while it goes is a short note, not an error', async () => {
    await page.locator(TAB('schedules')).click();
    const row = page.locator(ROW);
    await row.waitFor({ timeout: 30_000 });
    const before = (await schedule()).status.recent[0].job; // recent keeps ten: the newest
    await row.locator('.jp-NBValidation-runNow').click();
    await row
      .locator('.jp-NBValidation-scheduleNote', { hasText: 'Started a run.' })
      .waitFor({ timeout: 15_000 });
    await row.locator('.jp-NBValidation-runNow:not([disabled])').waitFor({ timeout: 15_000 });
    await row.locator('.jp-NBValidation-runNow').click();
    const note = row.locator('.jp-NBValidation-scheduleNote[role="status"]', {
      hasText: 'A run is still going'
    });
    await note.waitFor({ timeout: 15_000 });
    assert.equal(await page.locator('.jp-Dialog').count(), 0, 'a 409 is no dialog');
    assert.equal(await page.locator(`${PANEL} .jp-NBValidation-error`).count(), 0);
    const s = await until(
      'the run ended',
      x => !x.status.active && x.status.recent[0].job !== before && !!x.status.recent[0].finished
    );
    assert.equal(s.spec.suspend, true, 'Run now does not resume it');
    // Resume: spec.suspend false again
    await row.locator('.jp-NBValidation-pause').click();
    await until('resumed', x => x.spec.suspend === false, 15_000);
    await row.locator('.jp-NBValidation-pause', { hasText: 'Pause' }).waitFor({ timeout: 15_000 });
    await row.locator('.jp-NBValidation-pause').click();
    await until('paused again', x => x.spec.suspend === true, 15_000);
  });

  test('the tabs by keyboard, and the dark theme', async () => {
    await setTheme('JupyterLab Dark');
    await openLabAndPanel();
    await page.locator(TAB('jobs')).focus();
    await page.keyboard.press('ArrowRight');
    await page.locator(`${TAB('schedules')}[aria-selected="true"]`).waitFor({ timeout: 10_000 });
    assert.equal(
      await page.evaluate(() => document.activeElement?.getAttribute('data-view')),
      'schedules'
    );
    // the newest run, once none goes (a mark by its job: the strip keeps ten, the oldest leave)
    const job = (await until('no run goes', x => !x.status.active)).status.recent[0].job;
    const mark = page.locator(`${ROW} .jp-NBValidation-mark[data-job="${job}"]`);
    await mark.waitFor({ timeout: 30_000 });
    await shot('lab-schedules-dark.png', true);
    // a mark is a button: Tab reaches it, Enter opens its run
    await mark.focus();
    assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('data-job')), job);
    await page.keyboard.press('Enter');
    await page
      .locator(`${PANEL} .jp-NBValidation-detail[aria-label="Job ${job}"]`)
      .waitFor({ timeout: 30_000 })
      .catch(async e => {
        await page.screenshot({ path: path.join(ARTIFACTS, 'schedules-keyboard-failed.png') });
        console.log(`# strip ${JSON.stringify(await shownStrip())}`);
        console.log(`# panel ${await page.locator(PANEL).innerText()}`);
        throw e;
      });
    await setTheme('JupyterLab Light');
    const gone = await rest('DELETE', `${API}/schedules/${NAME}`);
    assert.equal(gone.status, 200, JSON.stringify(gone.body));
    assert.deepEqual(pageErrors, []);
  });
});
