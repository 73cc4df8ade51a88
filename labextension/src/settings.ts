/** The user settings (schema/plugin.json), kept current in one object. */
import type { ISettingRegistry } from '@jupyterlab/settingregistry';

export interface ISettings {
  defaultTimeout: string;
  buildEnabled: boolean;
  openPanelOnValidate: boolean;
}

export const DEFAULTS: ISettings = {
  defaultTimeout: '',
  buildEnabled: true,
  openPanelOnValidate: true
};

/** Settings at their defaults, then updated from the registry as it loads and changes. */
export function trackSettings(pluginId: string, registry: ISettingRegistry | null): ISettings {
  const settings: ISettings = { ...DEFAULTS };
  if (registry) {
    registry
      .load(pluginId)
      .then(s => {
        const read = () => {
          settings.defaultTimeout = String(s.get('defaultTimeout').composite ?? '');
          settings.buildEnabled = s.get('buildEnabled').composite !== false;
          settings.openPanelOnValidate = s.get('openPanelOnValidate').composite !== false;
        };
        read();
        s.changed.connect(read);
      })
      .catch(reason => console.warn('jupyter-nbvalidation: cannot load settings', reason));
  }
  return settings;
}
