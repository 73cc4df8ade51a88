/** The "Validate with options" dialog body (plain DOM, Dialog-compatible). */
import { Widget } from '@lumino/widgets';
import { describeOptionError, IOptionError, OPTION_FIELDS, OPTION_LABELS, OptionKey } from './spec';

import type { IValidateOptions } from './options';

export { emptyOptions } from './options';
export type { IValidateOptions } from './options';

let counter = 0;

type TextKey = Exclude<OptionKey, 'buildEnabled' | 'lax'>;

/** Where the dialog's options go: the project's settings file, or this run only. */
export type SaveMode = 'project' | 'once';

/** The dialog's value: the fields, and where they go. */
export interface IOptionsChoice extends IValidateOptions {
  save: SaveMode;
}

export class ValidateOptionsBody extends Widget {
  /**
   * `errors` (from the checks or the server's 400) are shown at their fields. `file`: the
   * project settings file the options are saved in (in words), or null when this server keeps
   * no project settings (then they apply to this run only, and are remembered in this browser).
   */
  constructor(
    defaults: IValidateOptions,
    errors: IOptionError[] = [],
    file: string | null = null,
    save: SaveMode = 'project'
  ) {
    super();
    this.addClass('jp-NBValidation-optionsForm');
    const id = `jp-nbvalidation-opt-${++counter}`;
    this._saveChoice(id, file, save);
    const general = errors.filter(e => !e.option);
    if (general.length) {
      const box = document.createElement('div');
      box.className = 'jp-NBValidation-optionError';
      box.setAttribute('role', 'alert');
      box.textContent = general.map(describeOptionError).join('\n');
      this.node.appendChild(box);
    }
    const text = (key: TextKey, type: 'text' | 'textarea', placeholder: string, help: string) => {
      this._texts[key] = this._input(
        `${id}-${key === 'goldenPath' ? 'golden' : key}`,
        key,
        type,
        defaults[key],
        placeholder,
        help,
        errors.filter(e => e.option === key)
      );
    };
    text(
      'goldenPath',
      'text',
      'golden.ipynb (beside the notebook), or /path/from/the/root.ipynb',
      'Outputs are compared cell by cell with this notebook. Relative to the notebook’s folder, as %nbvalidate --golden reads it; a leading / starts from the server’s root.'
    );
    this._check(`${id}-build`, 'buildEnabled', defaults.buildEnabled, errors);
    text('timeout', 'text', 'e.g. 30m, 1h30m, 90s', 'Whole validation; empty: the server default.');
    text(
      'cellTimeout',
      'text',
      'e.g. 10m or 60 (seconds)',
      'Each cell; empty: the server default.'
    );
    text(
      'absTolerance',
      'text',
      'default 1e-4',
      'Golden comparison (normalized): numbers may differ by this much.'
    );
    text('relTolerance', 'text', 'default 0', '… or by this fraction of the golden value.');
    text(
      'ignoreOutputs',
      'text',
      'e.g. stream:stderr, image/*',
      'Output types (stream, execute_result, display_data, error), streams or MIME types left out of the comparison.'
    );
    text(
      'parameters',
      'textarea',
      'epochs=1\nlabel="test"',
      'One NAME=VALUE per line, VALUE as JSON (else a string); injected as papermill does, after the cell tagged parameters.'
    );
    this._check(`${id}-lax`, 'lax', defaults.lax, errors);
    this._first = errors.find(e => e.option)?.option ?? null;
  }

  private _row(key: OptionKey, errors: IOptionError[]): HTMLDivElement {
    const row = document.createElement('div');
    row.className = 'jp-NBValidation-optionRow';
    row.dataset.option = key;
    row.dataset.field = OPTION_FIELDS[key];
    if (errors.length) {
      row.classList.add('jp-mod-invalid');
    }
    this.node.appendChild(row);
    return row;
  }

  private _error(row: HTMLElement, id: string, errors: IOptionError[]): string | null {
    if (!errors.length) {
      return null;
    }
    const msg = document.createElement('div');
    msg.id = `${id}-error`;
    msg.className = 'jp-NBValidation-optionError';
    msg.setAttribute('role', 'alert');
    msg.textContent = errors.map(describeOptionError).join('\n');
    row.appendChild(msg);
    return msg.id;
  }

  private _input(
    id: string,
    key: TextKey,
    type: 'text' | 'textarea',
    value: string,
    placeholder: string,
    help: string,
    errors: IOptionError[]
  ): HTMLInputElement | HTMLTextAreaElement {
    const row = this._row(key, errors);
    const label = document.createElement('label');
    label.htmlFor = id;
    label.textContent = OPTION_LABELS[key];
    const input =
      type === 'textarea' ? document.createElement('textarea') : document.createElement('input');
    input.className = 'jp-mod-styled';
    input.id = id;
    if (input instanceof HTMLInputElement) {
      input.type = 'text';
    } else {
      input.rows = 3;
    }
    input.value = value;
    input.placeholder = placeholder;
    const small = document.createElement('div');
    small.id = `${id}-help`;
    small.className = 'jp-NBValidation-optionHelp';
    small.textContent = help;
    row.append(label, input, small);
    const errorId = this._error(row, id, errors);
    input.setAttribute('aria-describedby', errorId ? `${errorId} ${small.id}` : small.id);
    if (errorId) {
      input.setAttribute('aria-invalid', 'true');
    }
    return input;
  }

  private _check(
    id: string,
    key: 'buildEnabled' | 'lax',
    checked: boolean,
    errors: IOptionError[]
  ): void {
    const mine = errors.filter(e => e.option === key);
    const row = this._row(key, mine);
    row.classList.add('jp-NBValidation-optionCheck');
    const box = document.createElement('input');
    box.type = 'checkbox';
    box.id = id;
    box.checked = checked;
    const label = document.createElement('label');
    label.htmlFor = id;
    label.textContent =
      key === 'buildEnabled'
        ? 'Build a fresh environment from the notebook’s requirements'
        : 'Lax mode: compare only cells marked # NBVAL_CHECK_OUTPUT (tag nbval-check-output)';
    row.append(box, label);
    this._error(row, id, mine);
    this._checks[key] = box;
  }

  /** "Save for this project" (the default) or "Only this time", and the file it writes. */
  private _saveChoice(id: string, file: string | null, save: SaveMode): void {
    const box = document.createElement('fieldset');
    box.className = 'jp-NBValidation-saveChoice';
    const legend = document.createElement('legend');
    legend.textContent = 'Keep these options';
    box.appendChild(legend);
    const choice = (mode: SaveMode, text: string, detail: string) => {
      const row = document.createElement('div');
      row.className = 'jp-NBValidation-saveRow';
      const radio = document.createElement('input');
      radio.type = 'radio';
      radio.name = `${id}-save`;
      radio.id = `${id}-save-${mode}`;
      radio.value = mode;
      radio.checked = mode === save;
      const label = document.createElement('label');
      label.htmlFor = radio.id;
      label.textContent = text;
      const small = document.createElement('div');
      small.className = 'jp-NBValidation-optionHelp';
      small.textContent = detail;
      row.append(radio, label, small);
      box.appendChild(row);
      this._save[mode] = radio;
    };
    if (file !== null) {
      choice(
        'project',
        'Save for this project',
        'Written to the file above; Validate, jupyter nbvalidation run and the pytest plugin use them.'
      );
      const where = document.createElement('div');
      where.className = 'jp-NBValidation-settingsFile';
      where.textContent = file;
      where.title = 'The project settings file these options are saved in';
      box.insertBefore(where, box.children[1]);
    } else {
      box.classList.add('jp-mod-noProject');
    }
    choice(
      'once',
      'Only this time',
      file !== null
        ? 'Sent with this validation only; nothing is written.'
        : 'This server keeps no project settings: the options go with this validation, and this browser remembers them for the notebook.'
    );
    if (file === null) {
      this._save.once!.checked = true;
    }
    this.node.appendChild(box);
  }

  /** The fields and where they go. */
  getValue(): IOptionsChoice {
    return { ...this.getOptions(), save: this._save.project?.checked ? 'project' : 'once' };
  }

  /** The fields alone. */
  getOptions(): IValidateOptions {
    const v = (key: TextKey) => this._texts[key]!.value.trim();
    return {
      goldenPath: v('goldenPath'),
      buildEnabled: this._checks.buildEnabled!.checked,
      timeout: v('timeout'),
      cellTimeout: v('cellTimeout'),
      absTolerance: v('absTolerance'),
      relTolerance: v('relTolerance'),
      ignoreOutputs: v('ignoreOutputs'),
      // keep the lines; only the ends of the whole text are trimmed
      parameters: v('parameters'),
      lax: this._checks.lax!.checked
    };
  }

  protected onAfterAttach(): void {
    // the dialog fits, or shows that it scrolls: a "more below" cue until the end is in view
    const node = this.node;
    const cue = () =>
      node.classList.toggle(
        'jp-mod-moreBelow',
        node.scrollHeight - node.scrollTop - node.clientHeight > 4
      );
    node.addEventListener('scroll', cue);
    requestAnimationFrame(cue);
    window.addEventListener('resize', cue);
    this._cue = cue;
    const first = this._first;
    const target =
      first && first !== 'buildEnabled' && first !== 'lax'
        ? this._texts[first]
        : this._texts.goldenPath;
    target?.focus();
  }

  protected onBeforeDetach(): void {
    if (this._cue) {
      window.removeEventListener('resize', this._cue);
    }
  }

  private _cue: (() => void) | null = null;
  private _save: Partial<Record<SaveMode, HTMLInputElement>> = {};
  private _texts: Partial<Record<TextKey, HTMLInputElement | HTMLTextAreaElement>> = {};
  private _checks: Partial<Record<'buildEnabled' | 'lax', HTMLInputElement>> = {};
  private _first: OptionKey | null;
}
