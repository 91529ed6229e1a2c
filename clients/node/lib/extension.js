// The extension unit that registers the provisioner under the name
// `sandboxd`, in the shape the seed's resolveExtensions takes: a unit is
// `{ name, drivers }` (registry.ts reads `unit.name` and `unit.drivers?.…`),
// and name-keyed driver points are a Map of name → factory
// (`drivers.artifactStorageDrivers`). The seeds we have do not show the
// ExtensionDrivers field for sandbox provisioners (drivers.ts imports
// SandboxProvisionerFactory, but the excerpt stops before the field), so
// it follows that naming: `drivers.sandboxProvisionerDrivers`.
import { newSandboxdProvisioner } from "./provisioner.js";

/** The name SANDBOX_PROVISIONER_TYPE selects this driver by. */
export const SANDBOXD_PROVISIONER_TYPE = "sandboxd";

export const sandboxdExtension = Object.freeze({
  name: "sandboxd",
  drivers: Object.freeze({
    sandboxProvisionerDrivers: new Map([[SANDBOXD_PROVISIONER_TYPE, newSandboxdProvisioner]]),
  }),
});
