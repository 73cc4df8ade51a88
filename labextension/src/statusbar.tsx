/** Status-bar item: the last verdict of the active notebook. */
import * as React from 'react';
import { ReactWidget } from '@jupyterlab/ui-components';
import { validateIcon } from './icons';
import type { ValidationModel } from './model';
import { isTerminal } from './phases';
import { useModel } from './components/useModel';
import { liveText } from './progress';
import { jobPhase } from './state';
import { statusBarText, verdictAttr } from './verdict';

export class ValidationStatus extends ReactWidget {
  constructor(
    readonly model: ValidationModel,
    readonly openPanel: () => void
  ) {
    super();
    this.addClass('jp-NBValidation-status');
  }

  render(): JSX.Element {
    return <StatusView model={this.model} openPanel={this.openPanel} />;
  }
}

function StatusView(props: { model: ValidationModel; openPanel: () => void }): JSX.Element | null {
  const { model, openPanel } = props;
  const now = useModel(model);
  const job = model.activeNotebookJob;
  if (!model.state.notebookPath) {
    return null;
  }
  const phase = job ? jobPhase(job) : '';
  // the panel's clock (model.now): the same elapsed time in both places
  const progress = liveText(job, now);
  const text = statusBarText(job, progress);
  const title = job
    ? `Last validation of ${model.state.notebookPath}: ${text} — click to open the validation panel`
    : 'Open the validation panel';
  return (
    <button
      type="button"
      className="jp-NBValidation-statusButton"
      data-phase={phase || 'None'}
      data-verdict={verdictAttr(job)}
      data-terminal={isTerminal(phase)}
      onClick={openPanel}
      title={title}
    >
      <validateIcon.react tag="span" className="jp-NBValidation-statusIcon" />
      <span>{text}</span>
    </button>
  );
}
