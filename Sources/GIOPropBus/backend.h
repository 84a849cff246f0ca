/* The GSettings backend's private interface: names (names.c), values (values.c), the cache of
 * the daemon's keys (cache.c), the write queue (writes.c) and the backend itself (backend.c). */
#ifndef PBGS_BACKEND_H
#define PBGS_BACKEND_H

#define G_LOG_DOMAIN "propbus"
#define G_SETTINGS_ENABLE_BACKEND
#include <gio/gio.h>
#include <gio/gsettingsbackend.h>

#define PBGS_BUS_NAME "org.propbus.PropBus1"
#define PBGS_ROOT_PATH "/org/propbus/PropBus1"
#define PBGS_MANAGER_INTERFACE "org.propbus.PropBus1.Manager"
#define PBGS_VALUES_INTERFACE "org.propbus.PropBus1.Values"
#define PBGS_MAX_KEY_LENGTH 255
/* How long a reader waits for the daemon before it reads what it has (the bus's own default
 * method-call timeout, which activation also stays within). */
#define PBGS_WAIT_SECONDS 25

/* names.c: GSettings paths and propbus keys. Each returns a new string, or NULL when the
 * path or key has no counterpart. */
gchar *pbgs_key_for_settings_key(const gchar *settings_key);
gchar *pbgs_group_for_settings_path(const gchar *settings_path);
gchar *pbgs_settings_key_for_key(const gchar *group, const gchar *name);
gchar *pbgs_settings_path_for_group(const gchar *group);
gchar *pbgs_object_path_for_group(const gchar *group);
gboolean pbgs_split_key(const gchar *key, gchar **group, gchar **name);

/* values.c: GVariant values in D-Bus form and back. */
gchar *pbgs_dbus_type_for(const GVariantType *type, GError **error);
GVariant *pbgs_to_dbus(GVariant *value, GError **error);
GVariant *pbgs_from_dbus(GVariant *value, const GVariantType *expected);
GVariant *pbgs_zero_value(const GVariantType *dbus_type);

/* Where a key's value comes from (ListProperties' `layer`). */
typedef enum {
    PBGS_LAYER_DEFAULT,   /* the definition's default: GSettings reads its schema's */
    PBGS_LAYER_USER,
    PBGS_LAYER_SITE,
    PBGS_LAYER_VENDOR,
    PBGS_LAYER_OVERRIDE,
    PBGS_LAYER_MANDATORY,
} PbgsLayer;

/* One key of a group, as the daemon last said it. */
typedef struct {
    GVariant *value;              /* the value clients read, in D-Bus form; NULL until known */
    GVariant *user_value;         /* the user's own value while a layer above hides it */
    GVariant *definition_default; /* the definition's default */
    GVariant *metadata;           /* the ListProperties metadata it was read with (a{sv}), or NULL */
    PbgsLayer layer;
    gboolean is_set;
    gboolean writable;
    gboolean stale;               /* changed since its metadata (layer, is_set) was read */
} PbgsEntry;

typedef enum {
    PBGS_GROUP_LOADING,     /* the first ListProperties is out */
    PBGS_GROUP_LOADED,
    PBGS_GROUP_UNAVAILABLE, /* no daemon, and none could be started */
} PbgsGroupState;

/* The keys of one propbus group (one GSettings path), kept by the daemon's signals. */
typedef struct {
    gchar *group;
    gchar *object_path;
    GHashTable *entries;      /* name -> PbgsEntry* */
    guint subscriptions;
    PbgsGroupState state;
    guint32 load_serial;      /* the ListProperties out for it, 0 when none */
    gboolean reload_wanted;   /* a change made the metadata stale while one was out */
    GPtrArray *early_signals; /* PropertiesChanged bodies that came while the first load was out */
} PbgsGroup;

/* A notification to send once the lock is released. */
typedef enum { PBGS_NOTIFY_CHANGED, PBGS_NOTIFY_WRITABLE } PbgsNotifyKind;
typedef struct {
    PbgsNotifyKind kind;
    gchar *key;
    gpointer origin_tag;
} PbgsNotification;

/* One key of a write: what GSettings wrote, in both forms, and how to create the key should
 * the daemon not have it. */
typedef struct {
    GVariant *value;        /* GSettings' form; NULL: a reset */
    GVariant *dbus_value;   /* D-Bus form */
    gchar *dbus_type;
    GVariant *new_default;  /* for CreateProperty: the schema's default, or the type's zero */
    gchar *summary;         /* the schema's summary, the new key's description */
} PbgsWrite;

/* A settings key's propbus group and name, worked out once per key (reads are hot). */
typedef struct {
    gchar *group; /* NULL: the path has no propbus key */
    gchar *name;
} PbgsName;

typedef struct _PbgsBackend PbgsBackend;

/* backend.c */
GType pbgs_backend_get_type(void);
void pbgs_backend_register(GIOModule *module);
void pbgs_notify(GPtrArray *notifications, PbgsNotifyKind kind, const gchar *key, gpointer origin_tag);
void pbgs_emit(PbgsBackend *backend, GPtrArray *notifications);

/* The state every part shares; its fields belong to `lock`. */
struct _PbgsBackend {
    GSettingsBackend parent_instance;
    GMutex lock;
    GCond cond;                  /* a load, a refresh or a write finished */
    GDBusConnection *bus;        /* our own connection; NULL without a session bus */
    guint filter;
    gchar *owner;                /* propbusd's unique name, NULL while it has none */
    GHashTable *groups;          /* group -> PbgsGroup* */
    GHashTable *loads;           /* serial -> PbgsGroup* of each ListProperties out */
    guint32 owner_serial;        /* the GetNameOwner out at start */
    GHashTable *pending;         /* settings key -> PbgsWrite*, not sent yet */
    GHashTable *in_flight;       /* the same, sent and not answered */
    GHashTable *in_flight_serials; /* serials of the calls of the write out */
    gchar *in_flight_error;      /* the first error one of them answered */
    GHashTable *schema_paths;    /* settings path -> schema id, for defaults of new keys */
    GHashTable *names;           /* settings key -> PbgsName*, as read or written so far */
};

/* cache.c (the lock held unless said otherwise) */
PbgsGroup *pbgs_group_for_path(PbgsBackend *backend, const gchar *settings_path, gboolean create);
PbgsGroup *pbgs_group_named(PbgsBackend *backend, const gchar *group_name, gboolean create);
void pbgs_group_free(gpointer group);
void pbgs_group_load(PbgsBackend *backend, PbgsGroup *group);
void pbgs_group_drop(PbgsBackend *backend, PbgsGroup *group);
void pbgs_wait_loaded(PbgsBackend *backend, PbgsGroup *group, const gchar *name);
void pbgs_reload_all(PbgsBackend *backend);
GDBusMessage *pbgs_filter(GDBusConnection *bus, GDBusMessage *message, gboolean incoming, gpointer data);
gboolean pbgs_send(PbgsBackend *backend, GDBusMessage *message, guint32 *serial);
void pbgs_add_match(PbgsBackend *backend, const gchar *rule, gboolean add);
void pbgs_entry_free(gpointer entry);
const PbgsName *pbgs_name_of(PbgsBackend *backend, const gchar *settings_key);
void pbgs_name_free(gpointer name);

/* writes.c (the lock held) */
void pbgs_write_free(gpointer write);
PbgsWrite *pbgs_effective(PbgsBackend *backend, const gchar *settings_key);
GVariant *pbgs_visible(PbgsEntry *entry);
void pbgs_queue(PbgsBackend *backend, GHashTable *changes);
gboolean pbgs_take_reply(PbgsBackend *backend, GDBusMessage *reply, GPtrArray *notifications);
void pbgs_learn_from_own_write(PbgsBackend *backend, PbgsGroup *group, const gchar *name, PbgsEntry *entry);

#endif
