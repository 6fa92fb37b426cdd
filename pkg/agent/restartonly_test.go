package agent

import (
	"reflect"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/config"
)

// reloadable are the host.conf settings a running daemon takes on an edit
// (docs/operations.md). Every other field of config.HostConf must be kept
// by keepRestartOnly until a restart: a new key has to be put on one side.
var reloadable = map[string]bool{
	"Path": true, "Unknown": true, // not settings
	"EnableCudaMPS": true, "ContainerDeviceConfigFile": true, "CudaMPSReplicas": true,
	"SetExclusiveComputeMode": true, "SyncInterval": true, "CDIShmPath": true,
	"Accounting": true, "Threads": true, "ReloadHoldTime": true, "ViewLibrary": true,
}

func TestEveryHostConfKeyIsReloadableOrKeptUntilRestart(t *testing.T) {
	typ := reflect.TypeFor[config.HostConf]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		var cur, next config.HostConf
		v := reflect.ValueOf(&next).Elem().Field(i)
		if !setNonZero(v) {
			t.Errorf("HostConf.%s: the test cannot set a %s; teach setNonZero", f.Name, f.Type)
			continue
		}
		kept := keepRestartOnly(&cur, &next)
		restartOnly := len(kept) == 1 && reflect.ValueOf(next).Field(i).IsZero()
		switch {
		case restartOnly && reloadable[f.Name]:
			t.Errorf("HostConf.%s is listed as reloadable but kept until a restart (%v)", f.Name, kept)
		case !restartOnly && !reloadable[f.Name]:
			t.Errorf("HostConf.%s is neither kept until a restart by keepRestartOnly nor listed as reloadable here (kept %v): decide which", f.Name, kept)
		}
	}
}

// setNonZero gives v a value other than its zero value.
func setNonZero(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		v.SetString("changed")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(7 * time.Second))
		} else {
			v.SetInt(7)
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && setNonZero(v.Field(i)) {
				return true
			}
		}
		return false
	default:
		return false
	}
	return true
}
