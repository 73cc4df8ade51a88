/**
 * The Options dialog and the project settings file (issue 42, the REST contract): the dialog's
 * values from the merged options, and the notebook's own entry written back (fields the dialog
 * does not show kept, what the notebook inherits anyway not copied, emptied fields removed).
 */
import { emptyOptions } from '../src/options';
import {
  entryFromValues,
  fileWords,
  goldenForFile,
  valuesFromOptions
} from '../src/projectsettings';

const NB = 'lessons/week1/analysis.ipynb';
const defaults = emptyOptions(true, '');

describe('the dialog reads the merged options', () => {
  it('shows every field it edits', () => {
    const v = valuesFromOptions(
      {
        goldenNotebook: { path: 'golden.ipynb' },
        cellTimeout: 60,
        timeout: '10m',
        comparisonConfig: {
          floatingPointTolerance: 0.01,
          relativeTolerance: 0,
          ignoreOutputTypes: ['stream:stderr', 'image/*'],
          lax: true
        },
        parameters: { epochs: 1, label: 'x' },
        podConfig: { buildConfig: { enabled: false } }
      },
      defaults
    );
    expect(v).toEqual({
      goldenPath: 'golden.ipynb',
      buildEnabled: false,
      timeout: '10m',
      cellTimeout: '60',
      absTolerance: '0.01',
      relTolerance: '0',
      ignoreOutputs: 'stream:stderr, image/*',
      parameters: 'epochs=1\nlabel="x"',
      lax: true
    });
  });
});

describe('the dialog writes the notebook’s own entry', () => {
  it('writes what differs from what the notebook gets anyway, and keeps fields it does not show', () => {
    const entry = entryFromValues(
      NB,
      { ...defaults, goldenPath: 'golden.ipynb', absTolerance: '0.01', cellTimeout: '60' },
      {
        options: { cellTimeout: 60, inputFiles: ['data/*.csv'] },
        entry: { inputFiles: ['data/*.csv'], comparisonConfig: { sanitizers: [] } }
      }
    );
    expect(entry).toEqual({
      inputFiles: ['data/*.csv'],
      goldenNotebook: { path: 'golden.ipynb' },
      comparisonConfig: { sanitizers: [], floatingPointTolerance: 0.01 }
    });
  });

  it('removes a field emptied in the dialog from the entry', () => {
    const entry = entryFromValues(
      NB,
      { ...defaults },
      {
        options: { goldenNotebook: { path: 'golden.ipynb' }, comparisonConfig: { lax: true } },
        entry: { goldenNotebook: { path: 'golden.ipynb' }, comparisonConfig: { lax: true } }
      }
    );
    expect(entry).toEqual({});
  });

  it('keeps a golden path from the root relative to the notebook’s folder', () => {
    expect(goldenForFile(NB, '/lessons/expected/analysis.ipynb')).toBe(
      '../expected/analysis.ipynb'
    );
    expect(goldenForFile(NB, '/lessons/week1/golden.ipynb')).toBe('golden.ipynb');
    expect(goldenForFile(NB, './golden.ipynb')).toBe('golden.ipynb');
    expect(goldenForFile('top.ipynb', '/a/b.ipynb')).toBe('a/b.ipynb');
  });

  it('says which file it writes', () => {
    expect(fileWords({ file: 'pyproject.toml', exists: true })).toBe(
      'pyproject.toml ([tool.nbvalidation])'
    );
    expect(fileWords({ file: 'lessons/nbvalidation.toml', exists: false })).toBe(
      'lessons/nbvalidation.toml — created when you save'
    );
  });
});
