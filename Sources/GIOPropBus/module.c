/* GIO's entry points: GIO loads lib*.so files from its modules directory (and
 * GIO_EXTRA_MODULES), asks each which extension points it implements, and loads it when one is
 * needed. This module implements the GSettings backend named "propbus". */
#include "backend.h"
#include "giopropbus.h"

G_MODULE_EXPORT void g_io_module_load(GIOModule *module) {
    pbgs_backend_register(module);
}

G_MODULE_EXPORT void g_io_module_unload(GIOModule *module) {
    (void) module;
}

G_MODULE_EXPORT gchar **g_io_module_query(void) {
    return g_strsplit(G_SETTINGS_BACKEND_EXTENSION_POINT_NAME, "!", 0);
}
