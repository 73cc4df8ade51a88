import { buildSpec, isValidTimeout, rootRelative } from '../src/spec';

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
});

describe('isValidTimeout (same forms as the server)', () => {
  it.each(['', '30m', '1h30m', '90s', '500ms', '1.5h'])('accepts %p', v => {
    expect(isValidTimeout(v)).toBe(true);
  });
  it.each(['30', 'm', '1d', '-5m', '30 m'])('rejects %p', v => {
    expect(isValidTimeout(v)).toBe(false);
  });
});
