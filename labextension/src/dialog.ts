/** The "Validate with options" dialog body (plain DOM, Dialog-compatible). */
import { Widget } from '@lumino/widgets';

export interface IValidateOptions {
  goldenPath: string;
  buildEnabled: boolean;
  timeout: string;
}

let counter = 0;

export class ValidateOptionsBody extends Widget {
  constructor(defaults: IValidateOptions) {
    super();
    this.addClass('jp-NBValidation-optionsForm');
    const id = `jp-nbvalidation-opt-${++counter}`;

    this._golden = this._input(
      `${id}-golden`,
      'Golden notebook (optional)',
      'text',
      defaults.goldenPath,
      'path/to/golden.ipynb',
      'Outputs are compared cell by cell with this notebook.'
    );
    this._timeout = this._input(
      `${id}-timeout`,
      'Timeout',
      'text',
      defaults.timeout,
      'e.g. 30m, 1h30m, 90s',
      'Overall validation timeout; empty means the server default.'
    );

    const row = document.createElement('div');
    row.className = 'jp-NBValidation-optionRow jp-NBValidation-optionCheck';
    this._build = document.createElement('input');
    this._build.type = 'checkbox';
    this._build.id = `${id}-build`;
    this._build.checked = defaults.buildEnabled;
    const label = document.createElement('label');
    label.htmlFor = this._build.id;
    label.textContent = 'Build a fresh environment from the notebook’s requirements';
    row.append(this._build, label);
    this.node.appendChild(row);
  }

  private _input(
    id: string,
    labelText: string,
    type: string,
    value: string,
    placeholder: string,
    help: string
  ): HTMLInputElement {
    const row = document.createElement('div');
    row.className = 'jp-NBValidation-optionRow';
    const label = document.createElement('label');
    label.htmlFor = id;
    label.textContent = labelText;
    const input = document.createElement('input');
    input.className = 'jp-mod-styled';
    input.id = id;
    input.type = type;
    input.value = value;
    input.placeholder = placeholder;
    input.setAttribute('aria-describedby', `${id}-help`);
    const small = document.createElement('div');
    small.id = `${id}-help`;
    small.className = 'jp-NBValidation-optionHelp';
    small.textContent = help;
    row.append(label, input, small);
    this.node.appendChild(row);
    return input;
  }

  getValue(): IValidateOptions {
    return {
      goldenPath: this._golden.value.trim(),
      buildEnabled: this._build.checked,
      timeout: this._timeout.value.trim()
    };
  }

  protected onAfterAttach(): void {
    this._golden.focus();
  }

  private _golden: HTMLInputElement;
  private _timeout: HTMLInputElement;
  private _build: HTMLInputElement;
}
