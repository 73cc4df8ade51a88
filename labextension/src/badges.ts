/**
 * Verdict badges in the file browser: beside each notebook's name, its
 * newest job's verdict (✓ succeeded, ✗ failed, ⚠ infrastructure error,
 * ⊘ cancelled, ◌ running),
 * updated live from the model (job list + event bus). A decoration: the
 * listing renders its items as usual; after each render (a DOM mutation) a
 * badge is put after the item's name, or updated, or removed.
 */
import type { FileBrowser } from '@jupyterlab/filebrowser';
import type { ValidationModel } from './model';
import type { IJob } from './types';
import { VerdictKind, phaseWord, verdictKind } from './verdict';

export const BADGE_CLASS = 'jp-NBValidation-fbBadge';

const SYMBOL: Record<VerdictKind, string> = {
  succeeded: '✓',
  failed: '✗',
  infrastructure: '⚠',
  cancelled: '⊘',
  running: '◌',
  none: ''
};

/** What a badge shows for a job (pure). */
export function badgeFor(job: IJob | undefined): {
  verdict: VerdictKind;
  text: string;
  title: string;
} {
  const verdict = verdictKind(job ?? null);
  if (!job || verdict === 'none') {
    return { verdict: 'none', text: '', title: '' };
  }
  return {
    verdict,
    text: SYMBOL[verdict],
    title: `Last validation: ${phaseWord(job)} (${job.metadata.name})`
  };
}

/** The server path of a listing item (the default drive has no prefix). */
function serverPath(path: string): string {
  const colon = path.indexOf(':');
  const slash = path.indexOf('/');
  return colon >= 0 && (slash < 0 || colon < slash) ? path.slice(colon + 1) : path;
}

export function decorateFileBrowser(browser: FileBrowser, model: ValidationModel): () => void {
  // the listing widget is protected: its node is found in the browser's
  let scheduled = false;
  const content = (): HTMLElement | null =>
    browser.node.querySelector<HTMLElement>('.jp-DirListing-content');

  const decorate = () => {
    scheduled = false;
    const root = content();
    if (!root) {
      return;
    }
    observe(root);
    const latest = model.latestByNotebook;
    const dir = serverPath(browser.model.path).replace(/^\/+|\/+$/g, '');
    const nodes = Array.from(root.querySelectorAll<HTMLElement>(':scope > .jp-DirListing-item'));
    nodes.forEach(node => {
      const text = node.querySelector<HTMLElement>('.jp-DirListing-itemText');
      // at any depth: the badge sits beside the name, which JupyterLab may wrap in an element of
      // its own (a query for a direct child missed it, added a badge per round, and each new badge
      // was a mutation that asked for another round)
      const found = Array.from(node.querySelectorAll<HTMLElement>(`.${BADGE_CLASS}`));
      found.slice(1).forEach(extra => extra.remove());
      let badge: HTMLElement | null = found[0] ?? null;
      const name = text?.textContent ?? '';
      const path = dir ? `${dir}/${name}` : name;
      const isNotebook = node.dataset.isdir !== 'true' && /\.ipynb$/i.test(name);
      const job = isNotebook ? latest.get(path) : undefined;
      const want = badgeFor(job);
      if (want.verdict === 'none' || !text) {
        badge?.remove();
        return;
      }
      if (!badge) {
        badge = document.createElement('span');
        badge.className = BADGE_CLASS;
        text.after(badge);
      }
      if (badge.dataset.verdict !== want.verdict) {
        badge.dataset.verdict = want.verdict;
      }
      if (badge.textContent !== want.text) {
        badge.textContent = want.text;
      }
      if (badge.title !== want.title) {
        badge.title = want.title;
        badge.setAttribute('aria-label', want.title);
      }
      if (badge.dataset.path !== path) {
        badge.dataset.path = path;
      }
    });
  };
  const schedule = () => {
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(decorate);
    }
  };
  const observer = new MutationObserver(records => {
    // our own badge edits do not ask for another round
    const isBadge = (n: Node) => (n as HTMLElement).classList?.contains(BADGE_CLASS) ?? false;
    const ours = (r: MutationRecord) =>
      isBadge(r.target) ||
      (r.type === 'childList' &&
        [...Array.from(r.addedNodes), ...Array.from(r.removedNodes)].every(isBadge));
    if (records.some(r => !ours(r))) {
      schedule();
    }
  });
  let observed: HTMLElement | null = null;
  const observe = (root: HTMLElement) => {
    if (observed !== root) {
      observer.disconnect();
      observer.observe(root, { childList: true, subtree: true });
      observed = root;
    }
  };
  model.changed.connect(schedule);
  browser.model.pathChanged.connect(schedule);
  schedule();
  void model.refreshIndex();
  return () => {
    observer.disconnect();
    model.changed.disconnect(schedule);
    browser.model.pathChanged.disconnect(schedule);
  };
}
