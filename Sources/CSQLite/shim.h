#ifndef PROPBUS_CSQLITE_SHIM_H
#define PROPBUS_CSQLITE_SHIM_H
#include <sqlite3.h>
#endif
