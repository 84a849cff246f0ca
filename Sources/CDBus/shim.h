#ifndef PROPBUS_CDBUS_SHIM_H
#define PROPBUS_CDBUS_SHIM_H
#include <dbus/dbus.h>
#endif
