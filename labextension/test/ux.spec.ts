/**
 * The panel's words and numbers (issue 12): cancelled is not failed, one cell
 * numbering, cell progress, the traceback's own cell first, accept-as-golden,
 * and the build log follower against a fake log that grows.
 */
import { BuildLogFollower } from '../src/buildlog';
import { cellLabel } from '../src/cells';
import { acceptCell, AcceptError, canAccept } from '../src/golden';
import { executedFileName, executedPath, lockCells, lockFileName } from '../src/nbfiles';
import { progressText, readProgress } from '../src/progress';
import { splitTraceback } from '../src/traceback';
import type { IBuildLogChunk, IJob, IValidationAPI } from '../src/types';
import { badgeFor } from '../src/badges';
import {
  environmentText,
  isCancelled,
  isInfrastructureError,
  phaseWord,
  sinceLastSuccessText,
  statusBarText,
  verdictKind
} from '../src/verdict';
import { at, job, T0, tr } from './fixtures';

function withStatus(j: IJob, status: Record<string, unknown>): IJob {
  return { ...j, status: { ...(j.status ?? {}), ...status } };
}

describe('cancelled is its own verdict', () => {
  const cancelled = withStatus(job('c', 'a.ipynb', 'Failed', 0), { reason: 'Cancelled' });
  const failed = withStatus(job('f', 'a.ipynb', 'Failed', 0), { reason: 'ValidationFailed' });
  const ok = job('s', 'a.ipynb', 'Succeeded', 0);

  it('tells a cancel from a failure', () => {
    expect(isCancelled(cancelled)).toBe(true);
    expect(isCancelled(failed)).toBe(false);
    expect(verdictKind(cancelled)).toBe('cancelled');
    expect(verdictKind(failed)).toBe('failed');
    expect(verdictKind(ok)).toBe('succeeded');
    expect(verdictKind(job('r', 'a.ipynb', 'Building', 0))).toBe('running');
    expect(verdictKind(null)).toBe('none');
  });

  it('reads the reason from the Failed transition when status.reason is missing', () => {
    const j = job('c2', 'a.ipynb', 'Failed', 0, [
      tr('Initializing', 0),
      tr('Failed', 3, 'Cancelled')
    ]);
    expect(isCancelled(j)).toBe(true);
  });

  it('has its own words in the badge and the status bar', () => {
    expect(phaseWord(cancelled)).toBe('Cancelled');
    expect(phaseWord(failed)).toBe('Failed');
    expect(statusBarText(cancelled)).toBe('Validation cancelled ⊘');
    expect(statusBarText(failed)).toBe('Validation failed ✗');
    expect(statusBarText(ok)).toBe('Validated ✓');
    expect(statusBarText(null)).toBe('Not validated');
    expect(statusBarText(job('r', 'a.ipynb', 'ValidationRunning', 0), 'Cell 3 running')).toBe(
      'Validating: Cell 3 running'
    );
  });
});

describe('an infrastructure error is not a notebook failure', () => {
  const infra = withStatus(job('i', 'a.ipynb', 'Failed', 0), {
    reason: 'InfrastructureFailed',
    message: 'No space left on device in /data/jobs/x/run-1.'
  });
  const failed = withStatus(job('f', 'a.ipynb', 'Failed', 0), { reason: 'ValidationFailed' });

  it('has its own kind, word, symbol and status bar text', () => {
    expect(isInfrastructureError(infra)).toBe(true);
    expect(isInfrastructureError(failed)).toBe(false);
    expect(verdictKind(infra)).toBe('infrastructure');
    expect(verdictKind(failed)).toBe('failed');
    expect(phaseWord(infra)).toBe('Infrastructure error');
    expect(statusBarText(infra)).toBe('Validation error (infrastructure, not the notebook) ⚠');
    expect(badgeFor(infra)).toEqual({
      verdict: 'infrastructure',
      text: '⚠',
      title: 'Last validation: Infrastructure error (i)'
    });
  });
});

describe('every verdict says its environment', () => {
  it('shows status.environment in the job detail, nothing before it is planned', () => {
    const env = '2 requirements from requirements.txt beside the notebook';
    const failed = withStatus(job('f', 'a.ipynb', 'Failed', 0), { environment: env });
    expect(environmentText(failed)).toBe(`Environment: ${env}`);
    expect(environmentText(job('p', 'a.ipynb', 'Initializing', 0))).toBeNull();
    expect(environmentText(null)).toBeNull();
  });

  it('says what changed since the last success under a failed job, nothing otherwise', () => {
    const failed = job('f', 'a.ipynb', 'Failed', 0);
    const changes = {
      since: { name: 'a-1', completionTime: new Date(T0 - 2 * 86400 * 1000).toISOString() },
      sentence: 'pandas 2.2.3 → 3.0.0; no cell changed'
    };
    expect(sinceLastSuccessText(failed, changes, T0)).toBe(
      'Since the last success 2d ago: pandas 2.2.3 → 3.0.0; no cell changed'
    );
    const never = { since: null, sentence: 'no earlier success of this notebook' };
    expect(sinceLastSuccessText(failed, never, T0)).toBeNull();
    expect(sinceLastSuccessText(job('s', 'a.ipynb', 'Succeeded', 0), changes, T0)).toBeNull();
    expect(sinceLastSuccessText(failed, null, T0)).toBeNull();
  });
});

describe('one cell numbering', () => {
  it('says Cell N with N = index + 1, as the status bar after Go to cell', () => {
    expect(cellLabel(0)).toBe('Cell 1');
    expect(cellLabel(2)).toBe('Cell 3');
    expect(cellLabel(2, false)).toBe('cell 3');
  });
});

describe('cell progress', () => {
  const running = withStatus(job('p', 'a.ipynb', 'ValidationRunning', 0), {
    progress: {
      cellsTotal: 5,
      cellsDone: 2,
      currentCellIndex: 3,
      currentCellStartedAt: at(10),
      cells: [
        { cellIndex: 0, status: 'ok', executionTime: 0.5 },
        { cellIndex: 2, status: 'ok', executionTime: 1.25 }
      ],
      updatedAt: at(10)
    }
  });

  it('reads which cell runs, done/total and its elapsed time', () => {
    const view = readProgress(running, T0 + 13_500)!;
    expect(view.done).toBe(2);
    expect(view.total).toBe(5);
    expect(view.currentIndex).toBe(3);
    expect(view.currentElapsed).toBeCloseTo(3.5, 1);
    expect(view.percent).toBe(40);
    expect(view.cells.map(c => c.executionTime)).toEqual([0.5, 1.25]);
    expect(progressText(view)).toBe('Cell 4 running (2/5 done, 3.5s)');
  });

  it('has nothing to say without progress, and says done at the end', () => {
    expect(readProgress(job('x', 'a.ipynb', 'Building', 0), T0)).toBeNull();
    expect(progressText(null)).toBe('');
    const done = withStatus(running, {
      progress: { cellsTotal: 5, cellsDone: 5, currentCellIndex: null, cells: [] }
    });
    expect(progressText(readProgress(done, T0))).toBe('5/5 cells done');
  });
});

const PANDAS_TB = [
  '---------------------------------------------------------------------------',
  'KeyError                                  Traceback (most recent call last)',
  'File /env/lib/python3.11/site-packages/pandas/core/indexes/base.py:3805, in Index.get_loc(self, key)',
  '   3804 try:',
  '-> 3805     return self._engine.get_loc(casted_key)',
  '',
  'The above exception was the direct cause of the following exception:',
  '',
  'KeyError                                  Traceback (most recent call last)',
  'Cell In[3], line 2',
  '      1 df = load()',
  '----> 2 margin = df["price"] - df["cost"]',
  '',
  'File /env/lib/python3.11/site-packages/pandas/core/frame.py:4102, in DataFrame.__getitem__(self, key)',
  '   4100 if self.columns.nlevels > 1:',
  '-> 4102 indexer = self.columns.get_loc(key)',
  '',
  "KeyError: 'price'",
  'and a second line of the message'
].join('\n');

describe('traceback: the notebook’s own cell first', () => {
  it('splits IPython frames into the cell and library ones', () => {
    const split = splitTraceback({ cellIndex: 3, status: 'Failure', output: PANDAS_TB });
    expect(split.cellFrames).toHaveLength(1);
    expect(split.cellFrames[0].text).toContain('margin = df["price"] - df["cost"]');
    expect(split.libraryFrames).toHaveLength(2);
    expect(split.libraryFrames[1].text).toContain('frame.py:4102');
    expect(split.tail).toBe("KeyError: 'price'\nand a second line of the message");
    expect(split.head).toContain('Traceback (most recent call last)');
  });

  it('uses the server’s frames when the result has them', () => {
    const split = splitTraceback({
      cellIndex: 1,
      status: 'Failure',
      errorName: 'ValueError',
      output: 'x\nValueError: $\\tau$\nParseException: Expected end of text',
      frames: [
        { kind: 'library', text: 'File lib.py:1' },
        { kind: 'cell', text: 'Cell In[1], line 1\n----> 1 f()' }
      ]
    });
    expect(split.cellFrames.map(f => f.text)).toEqual(['Cell In[1], line 1\n----> 1 f()']);
    expect(split.libraryFrames.map(f => f.text)).toEqual(['File lib.py:1']);
    expect(split.tail).toBe('ValueError: $\\tau$\nParseException: Expected end of text');
  });

  it('keeps a traceback without frames whole', () => {
    const split = splitTraceback({
      cellIndex: 0,
      status: 'Failure',
      output: 'CellTimeoutError: 5s'
    });
    expect(split.cellFrames).toEqual([]);
    expect(split.tail).toBe('CellTimeoutError: 5s');
  });
});

describe('accept actual as golden', () => {
  const golden = {
    cells: [
      { cell_type: 'markdown', source: '# t', metadata: {} },
      {
        cell_type: 'code',
        source: 'print(2)',
        outputs: [{ output_type: 'stream', text: '1\n' }],
        execution_count: 1,
        metadata: { keep: true }
      }
    ],
    metadata: { golden: true },
    nbformat: 4
  };
  const executed = {
    cells: [
      { cell_type: 'markdown', source: '# t', metadata: {} },
      {
        cell_type: 'code',
        source: 'print(2)',
        outputs: [{ output_type: 'stream', text: '2\n' }],
        execution_count: 7,
        metadata: {}
      }
    ],
    metadata: {},
    nbformat: 4
  };

  it('writes that cell’s executed outputs into the golden notebook, nothing else', () => {
    const out = acceptCell(golden, executed, 1);
    expect(out.cells![1].outputs).toEqual([{ output_type: 'stream', text: '2\n' }]);
    expect(out.cells![1].execution_count).toBe(7);
    expect(out.cells![1].metadata).toEqual({ keep: true });
    expect(out.cells![1].source).toBe('print(2)');
    expect(out.cells![0]).toBe(golden.cells[0]);
    expect(out.metadata).toEqual({ golden: true });
    // the input is not changed
    expect(golden.cells[1].outputs).toEqual([{ output_type: 'stream', text: '1\n' }]);
  });

  it('refuses a pair that is not two code cells', () => {
    expect(() => acceptCell(golden, executed, 0)).toThrow(AcceptError);
    expect(() => acceptCell(golden, executed, 5)).toThrow(/no code cell 6/);
    expect(canAccept({ cellIndex: 1, diffType: 'output_mismatch' })).toBe(true);
    expect(canAccept({ cellIndex: 1, diffType: 'missing_cell' })).toBe(false);
  });
});

/** A build log that grows by one line per GET, with the documented headers. */
class GrowingLog {
  bytes = new Uint8Array(0);
  complete = false;
  calls: number[] = [];
  missing = false;
  withOffsets = true;

  append(text: string): void {
    const add = new TextEncoder().encode(text);
    const next = new Uint8Array(this.bytes.length + add.length);
    next.set(this.bytes);
    next.set(add, this.bytes.length);
    this.bytes = next;
  }

  api(): IValidationAPI {
    return {
      buildLog: async (_name: string, offset: number): Promise<IBuildLogChunk | null> => {
        this.calls.push(offset);
        if (this.missing) {
          return null;
        }
        const raw = this.withOffsets ? this.bytes.slice(offset) : this.bytes.slice();
        return {
          text: '',
          raw,
          bytes: raw.byteLength,
          nextOffset: this.withOffsets ? this.bytes.length : null,
          complete: this.withOffsets ? this.complete : null
        };
      }
    } as unknown as IValidationAPI;
  }
}

describe('build log follower', () => {
  it('appends from the next offset and stops once complete', async () => {
    const log = new GrowingLog();
    const f = new BuildLogFollower(log.api(), 'j', 60_000);
    log.append('Resolved 3 packages\n');
    f.follow('Building');
    await f.poll();
    expect(f.text).toBe('Resolved 3 packages\n');
    expect(f.available).toBe('yes');
    // a multi-byte character split between two answers is decoded whole
    const euro = new TextEncoder().encode('€');
    log.append('Installed ');
    log.bytes = new Uint8Array([...log.bytes, euro[0]]);
    await f.poll();
    log.bytes = new Uint8Array([...log.bytes, euro[1], euro[2]]);
    log.append('\n');
    log.complete = true;
    await f.poll();
    expect(f.text).toBe('Resolved 3 packages\nInstalled €\n');
    expect(log.calls).toEqual([0, 20, 31]);
    expect(f.complete).toBe(true);
    f.dispose();
  });

  it('says none when there is no build, and replaces the text from a server without offsets', async () => {
    const none = new GrowingLog();
    none.missing = true;
    const f = new BuildLogFollower(none.api(), 'j', 60_000);
    f.follow('ValidationRunning');
    await f.poll();
    expect(f.available).toBe('none');
    expect(f.complete).toBe(true);
    f.dispose();

    const old = new GrowingLog();
    old.withOffsets = false;
    old.append('a\n');
    const g = new BuildLogFollower(old.api(), 'k', 60_000);
    g.follow('Building');
    await g.poll();
    old.append('b\n');
    await g.poll();
    expect(g.text).toBe('a\nb\n');
    expect(old.calls).toEqual([0, 0]);
    g.dispose();
  });
});

describe('the executed notebook in the lab', () => {
  const j = job('nbv-7', 'dir/analysis.ipynb', 'Succeeded', 0);

  it('is named after the notebook and the job', () => {
    expect(executedPath(j)).toBe('nbv-7/analysis.ipynb');
    expect(executedFileName(j)).toBe('analysis.nbv-7.executed.ipynb');
    expect(lockFileName(j)).toBe('analysis.nbv-7.lock.txt');
  });

  it('shows every cell not editable and not deletable, outputs kept', () => {
    const nb = {
      cells: [
        { cell_type: 'code', metadata: { tags: ['x'] }, outputs: [{ output_type: 'stream' }] },
        { cell_type: 'markdown', source: '# t' }
      ],
      nbformat: 4
    };
    const locked = lockCells(nb) as { cells: Array<Record<string, unknown>> };
    expect(locked.cells[0].metadata).toEqual({ tags: ['x'], editable: false, deletable: false });
    expect(locked.cells[1].metadata).toEqual({ editable: false, deletable: false });
    expect(locked.cells[0].outputs).toEqual([{ output_type: 'stream' }]);
    expect(nb.cells[0].metadata).toEqual({ tags: ['x'] });
  });
});
