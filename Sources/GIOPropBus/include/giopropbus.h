/* The GSettings backend module (libgiopropbus.so): the three functions GIO looks up in a module.
 * Nothing else is exported; the backend is the "propbus" implementation of the
 * "gsettings-backend" extension point. */
#ifndef GIOPROPBUS_H
#define GIOPROPBUS_H
#include <gio/gio.h>

G_MODULE_EXPORT void g_io_module_load(GIOModule *module);
G_MODULE_EXPORT void g_io_module_unload(GIOModule *module);
G_MODULE_EXPORT gchar **g_io_module_query(void);
#endif
