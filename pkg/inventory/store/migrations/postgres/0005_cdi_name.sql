-- The CDI name a container runtime is given for a device (issue 5), set by
-- the host that registers it: yunion.io/mps-gpu=<GPU UUID>::<i>.
ALTER TABLE isolated_devices ADD COLUMN cdi_name TEXT NOT NULL DEFAULT '';
