/**
 * The Options dialog's values, as typed (no DOM here: the dialog's widget is in
 * dialog.ts; these are shared with remembered.ts and its tests).
 */
import type { ISpecOptions } from './spec';

/** Every field of the dialog, as typed. */
export interface IValidateOptions extends ISpecOptions {
  goldenPath: string;
  buildEnabled: boolean;
  timeout: string;
  cellTimeout: string;
  absTolerance: string;
  relTolerance: string;
  ignoreOutputs: string;
  parameters: string;
  lax: boolean;
}

export function emptyOptions(buildEnabled: boolean, timeout: string): IValidateOptions {
  return {
    goldenPath: '',
    buildEnabled,
    timeout,
    cellTimeout: '',
    absTolerance: '',
    relTolerance: '',
    ignoreOutputs: '',
    parameters: '',
    lax: false
  };
}
