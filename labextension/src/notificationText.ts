/** What a notification's toast says and which ones are shown (pure: notifications.ts shows them). */
import type { INotification } from './types';

/** The toast's text: "nb.ipynb (schedule nightly) turned red: the commit 9636f9a 'x is two'". */
export function toastText(n: INotification): string {
  const what = n.job.notebook ?? n.job.name;
  const schedule = n.schedule ? ` (schedule ${n.schedule})` : '';
  if (n.event === 'back-to-green') {
    return `${what}${schedule} is green again`;
  }
  if (n.event === 'infrastructure-failed') {
    return `${what}${schedule} could not be validated (infrastructure, not the notebook)`;
  }
  const cause = n.culprit?.message ? `: ${n.culprit.message}` : '';
  return `${what}${schedule} turned red${cause}`;
}

/** The unseen notifications not shown yet in this session, oldest first. */
export function toShow(items: INotification[], shown: ReadonlySet<string>): INotification[] {
  return items.filter(n => !n.seen && !shown.has(n.id)).reverse();
}
