import * as React from 'react';
import type { ValidationModel } from '../model';
import type { IJob } from '../types';
import { hideDataDir } from '../words';

/**
 * The build log, live while Building: the tail, auto-scrolled while the
 * reader is at the bottom, in a collapsible section (open while building).
 * Hidden when the job has no build (the server answers 404).
 */
export function BuildLog(props: {
  model: ValidationModel;
  job: IJob;
  /** open by itself (while Building, and when the build failed); collapsed otherwise */
  open?: boolean;
}): JSX.Element | null {
  const { model, job } = props;
  const name = job.metadata.name;
  const phase = job.status?.phase ?? '';
  const noBuild = job.spec.podConfig?.buildConfig?.enabled === false;
  // a job without a build has no log to ask for (hooks below stay unconditional)
  const follower = model.buildLog(noBuild ? '' : name);
  const [, setVersion] = React.useState(0);
  React.useEffect(() => {
    const onChange = () => setVersion(v => v + 1);
    follower.changed.connect(onChange);
    return () => {
      follower.changed.disconnect(onChange);
    };
  }, [follower]);
  React.useEffect(() => {
    if (!noBuild) {
      follower.follow(phase);
    }
  }, [follower, phase, noBuild]);

  const pre = React.useRef<HTMLPreElement>(null);
  const stick = React.useRef(true);
  React.useLayoutEffect(() => {
    const node = pre.current;
    if (node && stick.current) {
      node.scrollTop = node.scrollHeight;
    }
  });
  const building = phase === 'Building';
  const [open, setOpen] = React.useState<boolean | null>(null);
  if (noBuild || follower.available !== 'yes') {
    return null;
  }
  const isOpen = open ?? props.open ?? building;
  const lines = follower.text ? follower.text.replace(/\n$/, '').split('\n').length : 0;
  return (
    <details
      className="jp-NBValidation-section jp-NBValidation-buildLog"
      open={isOpen}
      data-complete={follower.complete}
      data-bytes={follower.offset}
      onToggle={e => {
        // only the reader's own toggles are kept: the automatic opening while Building must
        // not keep a finished job's log open
        const now = (e.currentTarget as HTMLDetailsElement).open;
        if (now !== isOpen) {
          setOpen(now);
        }
      }}
    >
      <summary className="jp-NBValidation-sectionTitle">
        <span>Build log{building ? ' (live)' : ''}</span>
        <span className="jp-NBValidation-source">
          {lines} line{lines === 1 ? '' : 's'}
          {' · '}
          <a
            className="jp-NBValidation-link"
            href={model.api.buildLogUrl(name)}
            target="_blank"
            rel="noopener noreferrer"
            onClick={e => e.stopPropagation()}
          >
            raw
          </a>
        </span>
      </summary>
      {follower.dropped > 0 && (
        <div className="jp-NBValidation-logNote">
          … the first {follower.dropped} characters are not shown
        </div>
      )}
      <pre
        ref={pre}
        className="jp-NBValidation-buildLogText"
        onScroll={e => {
          const n = e.currentTarget;
          stick.current = n.scrollHeight - n.scrollTop - n.clientHeight < 24;
        }}
      >
        {hideDataDir(follower.text) || (building ? 'Waiting for the build’s output…' : '(empty)')}
      </pre>
    </details>
  );
}
