import * as React from 'react';
import type { ValidationModel } from '../model';

export function ServerBanner(props: { model: ValidationModel }): JSX.Element | null {
  const { model } = props;
  switch (model.server) {
    case 'missing':
      return (
        <div className="jp-NBValidation-error" role="alert">
          The jupyter_nbvalidation server extension is not enabled on this Jupyter server. Run{' '}
          <code>jupyter server extension enable jupyter_nbvalidation</code> and restart the server.
        </div>
      );
    case 'unusable':
      return (
        <div className="jp-NBValidation-warning" role="status">
          The validation backend is not usable: {model.serverDetail}
        </div>
      );
    case 'unreachable':
      return (
        <div className="jp-NBValidation-warning" role="status">
          Cannot reach the validation API: {model.serverDetail}
        </div>
      );
    default:
      return null;
  }
}
