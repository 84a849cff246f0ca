#ifndef PROPBUS_CGIO_SHIM_H
#define PROPBUS_CGIO_SHIM_H
/* The GSettings backend module's view of GIO: GSettingsBackend's class structure is only
 * visible with G_SETTINGS_ENABLE_BACKEND. */
#define G_SETTINGS_ENABLE_BACKEND
#include <gio/gio.h>
#include <gio/gsettingsbackend.h>
#endif
