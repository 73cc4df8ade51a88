import { emptyOptions } from '../src/options';
import { forgetOptions, rememberedOptions, rememberOptions } from '../src/remembered';

class MemoryStorage implements Storage {
  private items = new Map<string, string>();
  get length(): number {
    return this.items.size;
  }
  clear(): void {
    this.items.clear();
  }
  getItem(key: string): string | null {
    return this.items.get(key) ?? null;
  }
  key(index: number): string | null {
    return [...this.items.keys()][index] ?? null;
  }
  removeItem(key: string): void {
    this.items.delete(key);
  }
  setItem(key: string, value: string): void {
    this.items.set(key, value);
  }
}

describe('options remembered per notebook', () => {
  it('gives back what a notebook was last validated with, and nothing for another', () => {
    const store = new MemoryStorage();
    const options = {
      ...emptyOptions(true, '30m'),
      goldenPath: 'golden/report.ipynb',
      relTolerance: '0.01'
    };
    expect(rememberedOptions('report.ipynb', store)).toBeNull();
    rememberOptions('report.ipynb', options, store);
    expect(rememberedOptions('report.ipynb', store)).toEqual(options);
    expect(rememberedOptions('other.ipynb', store)).toBeNull();
    forgetOptions('report.ipynb', store);
    expect(rememberedOptions('report.ipynb', store)).toBeNull();
  });

  it('reads what it can of a damaged entry and never throws', () => {
    const store = new MemoryStorage();
    store.setItem(
      'jupyter-nbvalidation:options:a.ipynb',
      '{"goldenPath": 3, "lax": true, "buildEnabled": false}'
    );
    expect(rememberedOptions('a.ipynb', store)).toEqual({
      ...emptyOptions(false, ''),
      lax: true
    });
    store.setItem('jupyter-nbvalidation:options:b.ipynb', 'not json');
    expect(rememberedOptions('b.ipynb', store)).toBeNull();
    const full = new MemoryStorage();
    full.setItem = () => {
      throw new Error('QuotaExceededError');
    };
    expect(() => rememberOptions('c.ipynb', emptyOptions(true, ''), full)).not.toThrow();
    expect(rememberedOptions('c.ipynb', null)).toBeNull();
  });
});
