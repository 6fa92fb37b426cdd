package mpsctl

import "slices"

// isolatedDeviceColumns are the columns of `isolated-device-list`, in
// Cloudpods' order. Always marks the fields the inventory fills on every row
// (pcie_info is optional: it is left out when the PCIe link is unknown).
// cdi_name, filled on every MPS row, is left to --details so the plain list
// keeps the layout Cloudpods users know; attach answers always show it.
func isolatedDeviceColumns(withCDI bool) []Column {
	cols := allDeviceColumns()
	if withCDI {
		return cols
	}
	return slices.DeleteFunc(cols, func(c Column) bool { return c.Field == "cdi_name" })
}

func allDeviceColumns() []Column {
	return []Column{
		{Header: "ID", Field: "id", Always: true},
		{Header: "Dev_type", Field: "dev_type", Always: true},
		{Header: "Sharing_mode", Field: "sharing_mode"},
		{Header: "Model", Field: "model", Always: true},
		{Header: "Vendor", Field: "vendor"},
		{Header: "Addr", Field: "addr", Always: true},
		{Header: "Vendor_device_id", Field: "vendor_device_id", Always: true},
		{Header: "Mdev_id", Field: "mdev_id"},
		{Header: "Host_id", Field: "host_id", Always: true},
		{Header: "Host", Field: "host"},
		{Header: "numa_node", Field: "numa_node", Always: true},
		{Header: "Guest_id", Field: "guest_id"},
		{Header: "Guest", Field: "guest"},
		{Header: "Guest_status", Field: "guest_status"},
		{Header: "Device_path", Field: "device_path", Always: true},
		{Header: "Render_path", Field: "render_path"},
		{Header: "PCIE_Info", Field: "pcie_info"},
		{Header: "Index", Field: "index", Always: true},
		{Header: "Device_minor", Field: "device_minor", Always: true},
		// Ours, after Cloudpods' columns and shown only when a row fills
		// them: the name to give a container runtime, and the states a
		// device may be in: not handed out (GPU unhealthy), or going once
		// released.
		{Header: "CDI_name", Field: "cdi_name"},
		{Header: "Unhealthy", Field: "unhealthy"},
		{Header: "Pending_removal", Field: "pending_removal"},
	}
}

// hostColumns are the columns of `host-list`.
func hostColumns() []Column {
	return []Column{
		{Header: "ID", Field: "id", Always: true},
		{Header: "Name", Field: "name", Always: true},
		{Header: "Access_ip", Field: "access_ip"},
		{Header: "Host_type", Field: "host_type"},
		{Header: "Created_at", Field: "created_at", Always: true},
	}
}
