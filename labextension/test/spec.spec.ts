import {
  buildSpec,
  checkOptions,
  describeOptionError,
  isValidTimeout,
  optionOfSpecField,
  parameterValue,
  parseParameters,
  goldenSpecPath,
  rootRelative
} from '../src/spec';

describe('buildSpec', () => {
  it('submits just the notebook by default', () => {
    expect(buildSpec('dir/nb.ipynb')).toEqual({ notebook: { path: 'dir/nb.ipynb' } });
  });

  it('adds golden notebook, timeout and the build switch', () => {
    expect(
      buildSpec('dir/nb.ipynb', {
        goldenPath: ' /g/golden.ipynb ',
        timeout: ' 30m ',
        buildEnabled: false
      })
    ).toEqual({
      notebook: { path: 'dir/nb.ipynb' },
      goldenNotebook: { path: 'g/golden.ipynb' },
      timeout: '30m',
      podConfig: { buildConfig: { enabled: false } }
    });
  });

  it('leaves out empty options', () => {
    expect(buildSpec('nb.ipynb', { goldenPath: '  ', timeout: '', buildEnabled: true })).toEqual({
      notebook: { path: 'nb.ipynb' },
      podConfig: { buildConfig: { enabled: true } }
    });
  });

  it('normalises user-typed paths to root-relative ones', () => {
    expect(rootRelative('./a/b.ipynb')).toBe('a/b.ipynb');
    expect(rootRelative('//a.ipynb')).toBe('a.ipynb');
  });

  it('reads the golden path from the notebook’s folder, or from the root after a /', () => {
    expect(goldenSpecPath('dir/sub/nb.ipynb', 'golden.ipynb')).toBe('dir/sub/golden.ipynb');
    expect(goldenSpecPath('dir/sub/nb.ipynb', './g/x.ipynb')).toBe('dir/sub/g/x.ipynb');
    expect(goldenSpecPath('dir/sub/nb.ipynb', '../expected/nb.ipynb')).toBe(
      'dir/expected/nb.ipynb'
    );
    expect(goldenSpecPath('dir/sub/nb.ipynb', '/g/golden.ipynb')).toBe('g/golden.ipynb');
    expect(goldenSpecPath('nb.ipynb', 'golden.ipynb')).toBe('golden.ipynb');
    expect(goldenSpecPath('nb.ipynb', '  ')).toBe('');
    // above the root: passed on for the server to refuse, naming the field
    expect(goldenSpecPath('nb.ipynb', '../x.ipynb')).toBe('../x.ipynb');
  });
});

describe('isValidTimeout (same forms as the server)', () => {
  it.each(['', '30m', '1h30m', '90s', '500ms', '1.5h'])('accepts %p', v => {
    expect(isValidTimeout(v)).toBe(true);
  });
  it.each(['30', 'm', '1d', '-5m', '30 m'])('rejects %p', v => {
    expect(isValidTimeout(v)).toBe(false);
  });
});

describe('the Options dialog: tolerances, ignored outputs, timeouts, parameters, lax mode', () => {
  const all = {
    goldenPath: 'g.ipynb',
    buildEnabled: false,
    timeout: '10m',
    cellTimeout: '60',
    absTolerance: '0.01',
    relTolerance: '1e-3',
    ignoreOutputs: 'stream:stderr, image/*  display_data',
    parameters:
      'epochs=1\n# a comment\n\nlabel = "test"\nrates=[0.1, 0.2]\nflag=True\nname=plain text',
    lax: true
  };

  it('puts every field where the server reads it (seconds as "60s", as the CLI does)', () => {
    expect(checkOptions(all)).toEqual([]);
    expect(buildSpec('nb.ipynb', all)).toEqual({
      notebook: { path: 'nb.ipynb' },
      goldenNotebook: { path: 'g.ipynb' },
      timeout: '10m',
      cellTimeout: '60s',
      comparisonConfig: {
        floatingPointTolerance: 0.01,
        relativeTolerance: 0.001,
        ignoreOutputTypes: ['stream:stderr', 'image/*', 'display_data'],
        lax: true
      },
      parameters: { epochs: 1, label: 'test', rates: [0.1, 0.2], flag: true, name: 'plain text' },
      podConfig: { buildConfig: { enabled: false } }
    });
  });

  it('leaves empty fields out (the server defaults apply); a zero tolerance is kept', () => {
    expect(buildSpec('nb.ipynb', { absTolerance: ' ', parameters: '\n\n', lax: false })).toEqual({
      notebook: { path: 'nb.ipynb' }
    });
    expect(buildSpec('nb.ipynb', { relTolerance: '0' }).comparisonConfig).toEqual({
      relativeTolerance: 0
    });
  });

  it('reads parameter values as -p does: JSON, papermill True/False/None, else a string', () => {
    expect(parameterValue('1')).toBe(1);
    expect(parameterValue('0.5')).toBe(0.5);
    expect(parameterValue('{"a": 1}')).toEqual({ a: 1 });
    expect(parameterValue('None')).toBeNull();
    expect(parameterValue('False')).toBe(false);
    expect(parameterValue('1.5.2')).toBe('1.5.2');
    expect(parseParameters('x=').parameters).toEqual({ x: '' });
  });

  const refused: Array<[string, Record<string, string>, string, RegExp]> = [
    [
      'an absolute tolerance that is no number',
      { absTolerance: 'abc' },
      'comparisonConfig.floatingPointTolerance',
      /"abc" is not a number/
    ],
    [
      'a negative relative tolerance',
      { relTolerance: '-1' },
      'comparisonConfig.relativeTolerance',
      /non-negative/
    ],
    [
      'a tolerance above the limit',
      { absTolerance: '2e9' },
      'comparisonConfig.floatingPointTolerance',
      /at most 1e\+09/
    ],
    [
      'a cell timeout that is no duration',
      { cellTimeout: '10 minutes' },
      'cellTimeout',
      /not a duration/
    ],
    ['a timeout above 24h', { timeout: '25h' }, 'timeout', /at most 24h/],
    ['a zero timeout', { timeout: '0s' }, 'timeout', /positive/],
    [
      'an unknown output type',
      { ignoreOutputs: 'stream:stderr, stdout' },
      'comparisonConfig.ignoreOutputTypes[1]',
      /"stdout" is not an output type/
    ],
    [
      'a line without =',
      { parameters: 'epochs 1' },
      'parameters',
      /line 1: "epochs 1" is not NAME=VALUE/
    ],
    [
      'a name that is no identifier',
      { parameters: 'a=1\n1x=2' },
      'parameters.1x',
      /line 2: "1x" must be a Python identifier/
    ],
    [
      'a Python keyword',
      { parameters: 'class=1' },
      'parameters.class',
      /class is a Python keyword/
    ],
    ['a name given twice', { parameters: 'a=1\na=2' }, 'parameters.a', /a is given twice/],
    [
      'broken JSON',
      { parameters: 'rates=[0.1, 0.2' },
      'parameters.rates',
      /\[0\.1, 0\.2 is not valid JSON/
    ],
    ['a number JSON cannot hold', { parameters: 'big=1e400' }, 'parameters.big', /finite/]
  ];
  it.each(refused)('refuses %s, naming the field', (_what, options, field, message) => {
    const errors = checkOptions(options);
    expect(errors).toHaveLength(1);
    expect(errors[0].field).toBe(field);
    expect(errors[0].message).toMatch(message);
    // the words name the dialog's field, never the spec path (that stays in data-field)
    expect(describeOptionError(errors[0])).toMatch(/^[A-Z][a-z]+( [a-z]+)*: /);
    expect(describeOptionError(errors[0])).not.toContain('comparisonConfig');
    expect(() => buildSpec('nb.ipynb', options)).toThrow(field);
  });

  it('says which dialog field a server error belongs to', () => {
    expect(optionOfSpecField('comparisonConfig.floatingPointTolerance')).toBe('absTolerance');
    expect(optionOfSpecField('spec.parameters.1x')).toBe('parameters');
    expect(optionOfSpecField('comparisonConfig.ignoreOutputTypes[0]')).toBe('ignoreOutputs');
    expect(optionOfSpecField('goldenNotebook.path')).toBe('goldenPath');
    expect(optionOfSpecField('goldenNotebook')).toBe('goldenPath');
    expect(optionOfSpecField('cellTimeout')).toBe('cellTimeout');
    expect(optionOfSpecField('timeout')).toBe('timeout');
    expect(optionOfSpecField('notebook.path')).toBeNull();
    expect(optionOfSpecField(null)).toBeNull();
  });
});
