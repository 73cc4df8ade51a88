import { toShow, toastText } from '../src/notificationText';
import type { INotification } from '../src/types';

function note(id: string, extra: Partial<INotification> = {}): INotification {
  return {
    id,
    event: 'turned-red',
    time: null,
    schedule: 'nightly',
    job: { name: id, notebook: 'nbs/check.ipynb' },
    culprit: {
      kind: 'commit',
      message: "the commit 9636f9a3693b 'x is two' (the environment did not change)"
    },
    seen: null,
    ...extra
  };
}

describe('notifications', () => {
  it('says what turned red and why', () => {
    expect(toastText(note('a'))).toBe(
      "nbs/check.ipynb (schedule nightly) turned red: the commit 9636f9a3693b 'x is two' (the environment did not change)"
    );
    expect(toastText(note('b', { event: 'back-to-green', culprit: null }))).toBe(
      'nbs/check.ipynb (schedule nightly) is green again'
    );
    expect(toastText(note('c', { event: 'infrastructure-failed', culprit: null }))).toContain(
      'infrastructure, not the notebook'
    );
  });

  it('shows each unseen one once, oldest first', () => {
    const items = [note('new'), note('old'), note('seen', { seen: '2026-12-07T17:00:00Z' })];
    expect(toShow(items, new Set()).map(n => n.id)).toEqual(['old', 'new']);
    expect(toShow(items, new Set(['old'])).map(n => n.id)).toEqual(['new']);
  });
});
