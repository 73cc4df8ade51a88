/**
 * Issue 42, the panel's words and order (pure): reason codes and spec paths become sentences,
 * data-dir paths are shortened, an instant Build complete is folded into Building, one live text
 * (and one clock) for the panel and the status bar, Find the cause only where something can be
 * searched, a reused environment says when it was built.
 */
import { canFindCause } from '../src/cause';
import { liveText } from '../src/progress';
import { computeTimeline, shownPhases } from '../src/timeline';
import type { IChanges, IJob } from '../src/types';
import { PHASES, Reason } from '../src/vocabulary';
import {
  agoWords,
  diffHeading,
  eventWords,
  hideDataDir,
  jobSentence,
  learnDataDirs,
  plainChanges,
  plainMessage,
  reusedText
} from '../src/words';
import { FULL_SUCCESS_EVENTS, T0, at, job, tr } from './fixtures';

/** Every reason code and phase name of the server's vocabulary that is not an English word. */
const CODES = [...Object.values(Reason), ...PHASES].filter(c => /[a-z][A-Z]/.test(c));

function failed(reason: string, message: string, extra: Record<string, unknown> = {}): IJob {
  const j = job('j', 'lessons/week1/analysis.ipynb', 'Failed', 0);
  return { ...j, status: { ...j.status, reason, message, ...extra } };
}

describe('plain words', () => {
  it('says where a missing golden notebook was looked for, without the spec path', () => {
    const text = plainMessage(
      'spec.goldenNotebook.path: no such notebook: nope.ipynb',
      'lessons/week1/analysis.ipynb'
    );
    expect(text).toBe(
      'The golden notebook nope.ipynb was not found next to analysis.ipynb (lessons/week1/). ' +
        'Check its name in Options…, or create it there.'
    );
  });

  it('names any other spec field in words', () => {
    expect(plainMessage('spec.comparisonConfig.relativeTolerance: must be at most 1')).toBe(
      'The relative tolerance: must be at most 1'
    );
    expect(plainMessage('bad value for spec.timeout')).toBe('bad value for the timeout');
  });

  it('shortens data-dir paths', () => {
    const text =
      'ran /root/.local/share/jupyter/nbvalidation/envs/.tmp-ab12/bin/python -c import ipykernel';
    expect(hideDataDir(text)).toBe('ran …/envs/.tmp-ab12/bin/python -c import ipykernel');
    // a data dir with a space: learnt from a job's environment reference
    const j = job('s', 'a.ipynb', 'Succeeded', 0);
    learnDataDirs({
      ...j,
      status: { ...j.status, buildStatus: { imageReference: '/tmp/x y/data/nbvalidation/envs/k1' } }
    });
    expect(plainMessage('Environment ready: /tmp/x y/data/nbvalidation/envs/k1.')).toBe(
      'Environment ready: …/envs/k1.'
    );
  });

  it('says what happened and what to do, for every failure reason, with no code in it', () => {
    const cases: IJob[] = [
      failed('BuildFailed', 'The environment build failed: pip exited with 1'),
      failed('BuildTimedOut', 'The build did not finish within 10m.'),
      failed('ValidationTimedOut', 'The validation did not finish within 10m.'),
      failed('InvalidInput', 'spec.goldenNotebook.path: no such notebook: nope.ipynb'),
      failed('InfrastructureFailed', 'The kernel could not be started: no space left'),
      failed('Cancelled', 'Cancelled by a user.'),
      failed('ValidationFailed', 'ValidationFailed: cell 2 raised', {
        failedCellIndex: 2,
        results: [{ cellIndex: 2, status: 'Failure', errorName: 'ZeroDivisionError' }]
      }),
      failed('ValidationFailed', 'outputs differ', {
        comparisonResult: { result: 'failed', mismatchedCells: 2, diffs: [] }
      })
    ];
    for (const j of cases) {
      const s = jobSentence(j) ?? '';
      expect(s).not.toBe('');
      for (const code of CODES) {
        expect(s).not.toContain(code);
      }
      expect(s).not.toMatch(/spec\.|goldenNotebook/);
    }
    expect(jobSentence(cases[6])).toBe(
      'Cell 3 raised ZeroDivisionError; the cells after it did not run. Fix the cell and validate again.'
    );
    expect(jobSentence(cases[3])).toMatch(
      /^The validation could not start: the golden notebook nope\.ipynb was not found next to analysis\.ipynb \(lessons\/week1\/\)/
    );
    expect(jobSentence(cases[7])).toMatch(/2 cells differ/);
  });

  it('puts event reasons, diff kinds and changed options in words', () => {
    expect(eventWords('BuildSucceeded')).toBe('Environment built');
    expect(eventWords('SomethingNew')).toBe('Something New');
    expect(diffHeading({ cellIndex: 2, diffType: 'output_mismatch', severity: 'major' })).toBe(
      'Cell 3: the output differs'
    );
    expect(plainChanges('options changed (podConfig, comparisonConfig); no cell changed')).toBe(
      'options changed (build setting, comparison settings); no cell changed'
    );
  });
});

describe('Find the cause, only where there is something to search', () => {
  const j = failed('ValidationFailed', 'x');
  const since = { name: 'old', completionTime: at(0) };
  const changes = (extra: Record<string, unknown>): IChanges => ({
    since,
    sentence: '',
    packages: { changedAny: false },
    python: null,
    requirements: { changed: false },
    golden: false,
    ...extra
  });
  it('is offered when packages, Python or requirements changed', () => {
    expect(canFindCause(j, changes({ packages: { changedAny: true } }))).toBe(true);
    expect(canFindCause(j, changes({ python: { from: '3.11', to: '3.12' } }))).toBe(true);
    expect(canFindCause(j, changes({ requirements: { changed: true } }))).toBe(true);
  });
  it('is not offered when only the golden file or the cells changed', () => {
    expect(canFindCause(j, changes({ golden: true }))).toBe(false);
    expect(canFindCause(j, changes({ cells: { changed: true } }))).toBe(false);
  });
});

describe('one live text and one clock for the panel and the status bar', () => {
  const running = (progress: unknown): IJob => {
    const j = job('r', 'a.ipynb', 'ValidationRunning', 0, [
      tr('Initializing', 0),
      tr('ValidationRunning', 10)
    ]);
    return { ...j, status: { ...j.status, progress: progress as never } };
  };
  it('says the kernel is starting until the first cell runs, with seconds from the phase start', () => {
    expect(liveText(running(null), T0 + 22_400)).toBe(
      'Starting the kernel in the new environment… 12 s'
    );
    expect(liveText(running({ cellsTotal: 3, cellsDone: 0 }), T0 + 11_000)).toBe(
      'Starting the kernel in the new environment… 1 s'
    );
  });
  it('then the cell progress', () => {
    const p = { cellsTotal: 3, cellsDone: 1, currentCellIndex: 2, currentCellStartedAt: at(20) };
    expect(liveText(running(p), T0 + 23_000)).toBe('Cell 3 running (1/3 done, 3s)');
  });
});

describe('the timeline shows no instant Build complete row', () => {
  it('folds it into Building', () => {
    const j = job('s', 'a.ipynb', 'Succeeded', 0);
    const rows = shownPhases(computeTimeline(FULL_SUCCESS_EVENTS, j, T0 + 60_000));
    expect(rows.map(r => r.phase)).toEqual([
      'Initializing',
      'Building',
      'ValidationRunning',
      'Succeeded'
    ]);
    expect(rows[1].durationSeconds).toBeCloseTo(30.5);
  });
  it('keeps a Build complete that lasted (waiting for a slot)', () => {
    const events = FULL_SUCCESS_EVENTS.map(e =>
      e.reason === 'ValidationStarted' ? { ...e, eventTime: at(35) } : e
    );
    const rows = shownPhases(computeTimeline(events, job('s', 'a.ipynb', 'Succeeded', 0), T0));
    expect(rows.map(r => r.phase)).toContain('BuildComplete');
  });
});

describe('a reused environment', () => {
  it('says when it was built instead of replaying its log', () => {
    const j = job('s', 'a.ipynb', 'Succeeded', 0);
    const reused = {
      ...j,
      status: { ...j.status, buildStatus: { builtAt: new Date(T0 - 3 * 86400_000).toISOString() } }
    };
    expect(reusedText(reused, T0)).toBe('reused (built 3 days ago)');
    expect(reusedText(j, T0)).toBeNull();
    expect(agoWords(T0 - 120_000, T0)).toBe('2 min ago');
  });
});

describe('a golden mismatch is not a failing cell', () => {
  it('says how many cells differ, even though the first one is marked', () => {
    const j = failed('ValidationFailed', '2 of 3 compared cells differ from the golden notebook', {
      failedCellIndex: 1,
      results: [
        { cellIndex: 0, status: 'Success' },
        { cellIndex: 1, status: 'Success' }
      ],
      comparisonResult: { result: 'failed', mismatchedCells: 2, diffs: [] }
    });
    expect(
      jobSentence({ ...j, spec: { ...j.spec, goldenNotebook: { path: 'g/golden.ipynb' } } })
    ).toBe(
      'Every cell ran, but 2 cells differ from golden.ipynb. If the new output is right, accept it as golden.'
    );
  });
});

describe('the project settings route’s refusals', () => {
  it('name the field in words too', () => {
    expect(
      plainMessage(
        "options.goldenNotebook.path: must be relative to the notebook's folder and stay inside the server root"
      )
    ).toBe(
      "The golden notebook: must be relative to the notebook's folder and stay inside the server root"
    );
  });
});
