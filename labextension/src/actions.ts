/** What the panel asks of the application (wired in index.ts). */
export interface IPanelActions {
  /** Validate the active notebook (runs the command). */
  validate(): void;
  /** Validate with options (runs the command). */
  validateWithOptions(): void;
  /** Open `path` and select cell `index`. */
  gotoCell(path: string, index: number): Promise<void> | void;
  /** Whether a notebook is active (enables Validate). */
  canValidate(): boolean;
}
