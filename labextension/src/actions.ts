/** What the panel asks of the application (wired in index.ts). */
import type { IJob } from './types';

export interface IPanelActions {
  /** Validate the active notebook (runs the command). */
  validate(): void;
  /** Validate with options (runs the command). */
  validateWithOptions(): void;
  /** Open `path` and select cell `index`. */
  gotoCell(path: string, index: number): Promise<void> | void;
  /** Whether a notebook is active (enables Validate). */
  canValidate(): boolean;
  /** Ask for a confirmation, then cancel the job. */
  cancel(job: IJob): Promise<void> | void;
  /** Open the job's executed notebook in a lab tab (read-only, no kernel). */
  openExecuted(job: IJob): Promise<void> | void;
  /** Download the job's executed notebook as .ipynb. */
  downloadExecuted(job: IJob): Promise<void> | void;
  /** Download the exact pins of the job's environment (a requirements file). */
  downloadLock(job: IJob): Promise<void> | void;
  /** Ask for a confirmation, then write cell `index`'s executed outputs into the golden notebook. */
  acceptGolden(job: IJob, index: number): Promise<void> | void;
  /** Ask once, then write all these cells' executed outputs into the golden notebook. */
  acceptAllGolden(job: IJob, indexes: number[]): Promise<void> | void;
}
