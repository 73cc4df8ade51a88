/** The command IDs this extension registers. */
export namespace CommandIDs {
  export const validate = 'nbvalidation:validate';
  export const validateWithOptions = 'nbvalidation:validate-with-options';
  export const openPanel = 'nbvalidation:open-panel';
}
