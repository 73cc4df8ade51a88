/**
 * The owner's notifications (a schedule's series that turned red, failed for
 * infrastructure or came back to green: docs/watching.md, "When it turns
 * red"), polled from the server and shown once each as a toast with a link
 * that opens the job in the panel. Shown or dismissed, a notification is
 * marked seen on the server, so another tab or a reload does not show it again.
 */
import { Notification } from '@jupyterlab/apputils';
import { toastText, toShow } from './notificationText';
import type { IValidationAPI } from './types';

export const POLL_MS = 30000;

/** Poll the server and toast what is new; returns a function that stops. */
export function followNotifications(
  api: IValidationAPI,
  openJob: (name: string) => void,
  intervalMs = POLL_MS
): () => void {
  const shown = new Set<string>();
  let timer: number | null = null;
  let stopped = false;
  const seen = (name: string) => void api.markNotificationSeen?.(name).catch(() => undefined);
  const poll = async () => {
    if (!api.notifications) {
      return;
    }
    try {
      const list = await api.notifications();
      for (const n of toShow(list.items ?? [], shown)) {
        shown.add(n.id);
        const notify = n.event === 'back-to-green' ? Notification.success : Notification.warning;
        notify(toastText(n), {
          autoClose: false,
          actions: [
            {
              label: 'Open the job',
              callback: () => {
                seen(n.id);
                openJob(n.job.name);
              }
            },
            { label: 'Dismiss', callback: () => seen(n.id), displayType: 'link' }
          ]
        });
      }
    } catch {
      // the server is away or has no notifications route: the panel's banner says so; try again later
    }
    if (!stopped) {
      timer = window.setTimeout(() => void poll(), intervalMs);
    }
  };
  void poll();
  return () => {
    stopped = true;
    if (timer !== null) {
      window.clearTimeout(timer);
    }
  };
}
