/* GSettingsBackend for propbus: GSettings keys are propbusd's keys (docs/dconf.md).
 *
 * Reads come from a copy of each subscribed group, filled by one ListProperties and kept by
 * the daemon's signals (cache.c): after the first, a read sends nothing. Writes go out in
 * batches (writes.c). The backend talks to propbusd on a connection of its own to the session
 * bus, so its match rules and its filter see only its own traffic. */
#include "backend.h"

#include <string.h>

typedef GSettingsBackendClass PbgsBackendClass;

G_DEFINE_TYPE(PbgsBackend, pbgs_backend, G_TYPE_SETTINGS_BACKEND)

static PbgsBackend *self(GSettingsBackend *backend) {
    return (PbgsBackend *) backend;
}

static void notification_free(gpointer data) {
    PbgsNotification *notification = data;
    g_free(notification->key);
    g_free(notification);
}

void pbgs_notify(GPtrArray *notifications, PbgsNotifyKind kind, const gchar *key, gpointer origin_tag) {
    if (notifications == NULL) return;
    PbgsNotification *notification = g_new0(PbgsNotification, 1);
    notification->kind = kind;
    notification->key = g_strdup(key);
    notification->origin_tag = origin_tag;
    g_ptr_array_add(notifications, notification);
}

/* The directory part of a settings key ("/a/b/" of "/a/b/c"), its length. */
static gsize directory_length(const gchar *key) {
    const gchar *slash = strrchr(key, '/');
    return slash ? (gsize) (slash - key + 1) : 0;
}

/* Sends the notifications, outside the lock: GSettings may call back in. Changes of one
 * directory in a row (one PropertiesChanged, one reply) go out as one keys_changed, so that a
 * GSettings sees another program's Apply as one change-event, as it sees its own. */
void pbgs_emit(PbgsBackend *backend, GPtrArray *notifications) {
    GSettingsBackend *settings = G_SETTINGS_BACKEND(backend);
    for (guint i = 0; i < notifications->len;) {
        PbgsNotification *n = g_ptr_array_index(notifications, i);
        guint run = 1;
        gsize length = directory_length(n->key);
        while (n->kind == PBGS_NOTIFY_CHANGED && i + run < notifications->len) {
            PbgsNotification *next = g_ptr_array_index(notifications, i + run);
            if (next->kind != PBGS_NOTIFY_CHANGED || next->origin_tag != n->origin_tag || directory_length(next->key) != length
                || strncmp(next->key, n->key, length) != 0)
                break;
            run++;
        }
        if (run > 1) {
            gchar *path = g_strndup(n->key, length);
            const gchar **items = g_new0(const gchar *, run + 1);
            for (guint j = 0; j < run; j++) items[j] = ((PbgsNotification *) g_ptr_array_index(notifications, i + j))->key + length;
            g_settings_backend_keys_changed(settings, path, items, n->origin_tag);
            g_free(items);
            g_free(path);
        } else if (n->kind == PBGS_NOTIFY_CHANGED) {
            g_settings_backend_changed(settings, n->key, n->origin_tag);
        } else {
            g_settings_backend_writable_changed(settings, n->key);
        }
        for (guint j = 0; j < run; j++) notification_free(g_ptr_array_index(notifications, i + j));
        i += run;
    }
    g_ptr_array_free(notifications, TRUE);
}

/* The daemon's entry for a settings key, after its group is loaded (created and loading if
 * new); NULL when the daemon has no such key. `group_out` gets the group: NULL for a key with
 * no propbus counterpart, or a group dropped while we waited. */
static PbgsEntry *entry_of_key(PbgsBackend *backend, const gchar *settings_key, PbgsGroup **group_out) {
    const PbgsName *name = pbgs_name_of(backend, settings_key);
    PbgsGroup *group = NULL;
    if (name->group != NULL) {
        group = pbgs_group_named(backend, name->group, TRUE);
        if (group->state == PBGS_GROUP_LOADING || group->load_serial != 0) {
            pbgs_wait_loaded(backend, group, name->name);
            /* Waiting released the lock. */
            group = pbgs_group_named(backend, name->group, FALSE);
        }
    }
    if (group_out) *group_out = group;
    return group ? g_hash_table_lookup(group->entries, name->name) : NULL;
}

static GVariant *decoded(GVariant *dbus_value, const GVariantType *type) {
    return dbus_value ? pbgs_from_dbus(dbus_value, type) : NULL;
}

static GVariant *backend_read(GSettingsBackend *settings, const gchar *key, const GVariantType *type, gboolean default_value) {
    PbgsBackend *backend = self(settings);
    GVariant *result = NULL;
    g_mutex_lock(&backend->lock);
    PbgsWrite *write = default_value ? NULL : pbgs_effective(backend, key);
    if (write != NULL && write->value != NULL) {
        result = g_variant_ref(write->value);
    } else {
        PbgsEntry *entry = entry_of_key(backend, key, NULL);
        if (entry != NULL && (default_value || write != NULL)) {
            /* What a reset leaves: a locked, overridden, site or vendor value; below the
             * user's own value the daemon says none, so the schema's default. */
            if (!entry->is_set || entry->layer == PBGS_LAYER_MANDATORY || entry->layer == PBGS_LAYER_OVERRIDE)
                result = decoded(entry->layer == PBGS_LAYER_DEFAULT ? NULL : entry->value, type);
        } else if (entry != NULL) {
            result = decoded(pbgs_visible(entry), type);
        }
    }
    g_mutex_unlock(&backend->lock);
    return result;
}

static GVariant *backend_read_user_value(GSettingsBackend *settings, const gchar *key, const GVariantType *type) {
    PbgsBackend *backend = self(settings);
    GVariant *result = NULL;
    g_mutex_lock(&backend->lock);
    PbgsWrite *write = pbgs_effective(backend, key);
    if (write != NULL) {
        result = write->value ? g_variant_ref(write->value) : NULL;
    } else {
        PbgsGroup *group;
        PbgsEntry *entry = entry_of_key(backend, key, &group);
        if (entry != NULL && entry->stale && group != NULL) {
            /* Rare enough to ask: whether the value is the user's is not in the signals. */
            pbgs_group_load(backend, group);
            pbgs_wait_loaded(backend, group, NULL);
            entry = entry_of_key(backend, key, NULL);
        }
        if (entry != NULL && entry->is_set) result = decoded(entry->user_value ? entry->user_value : entry->value, type);
    }
    g_mutex_unlock(&backend->lock);
    return result;
}

/* The schema whose path holds `settings_key`, for the default and summary of a key created by
 * this write; only schemas with a fixed path can say. */
static void schema_facts(PbgsBackend *backend, const gchar *settings_key, const GVariantType *type, PbgsWrite *write) {
    GSettingsSchemaSource *source = g_settings_schema_source_get_default();
    const gchar *slash = strrchr(settings_key, '/');
    if (source != NULL && slash != NULL) {
        g_mutex_lock(&backend->lock);
        if (backend->schema_paths == NULL) {
            backend->schema_paths = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
            gchar **ids = NULL;
            g_settings_schema_source_list_schemas(source, TRUE, &ids, NULL);
            for (gchar **id = ids; id && *id; id++) {
                GSettingsSchema *schema = g_settings_schema_source_lookup(source, *id, TRUE);
                if (schema && g_settings_schema_get_path(schema))
                    g_hash_table_insert(backend->schema_paths, g_strdup(g_settings_schema_get_path(schema)), g_strdup(*id));
                if (schema) g_settings_schema_unref(schema);
            }
            g_strfreev(ids);
        }
        gchar *path = g_strndup(settings_key, (gsize) (slash - settings_key + 1));
        gchar *id = g_strdup(g_hash_table_lookup(backend->schema_paths, path));
        g_free(path);
        g_mutex_unlock(&backend->lock);
        GSettingsSchema *schema = id ? g_settings_schema_source_lookup(source, id, TRUE) : NULL;
        if (schema != NULL && g_settings_schema_has_key(schema, slash + 1)) {
            GSettingsSchemaKey *key = g_settings_schema_get_key(schema, slash + 1);
            GVariant *value = g_settings_schema_key_get_default_value(key);
            if (value != NULL && g_variant_is_of_type(value, type)) write->new_default = pbgs_to_dbus(value, NULL);
            if (value != NULL) g_variant_unref(value);
            const gchar *summary = g_settings_schema_key_get_summary(key);
            if (summary != NULL) write->summary = g_strdup(summary);
            g_settings_schema_key_unref(key);
        }
        if (schema != NULL) g_settings_schema_unref(schema);
        g_free(id);
    }
    if (write->new_default == NULL) write->new_default = pbgs_zero_value(G_VARIANT_TYPE(write->dbus_type));
}

/* Checks one key of a write and adds it to `changes`; FALSE (with a warning where GSettings
 * gives none) when the daemon would refuse it. Sets `*effect` when it changes what reads give. */
static gboolean prepare(PbgsBackend *backend, const gchar *settings_key, GVariant *value, GHashTable *changes, gboolean *effect) {
    gchar *key = pbgs_key_for_settings_key(settings_key);
    if (key == NULL) {
        g_warning("cannot write %s: the path has no propbus key (docs/dconf.md, \"Names\")", settings_key);
        return FALSE;
    }
    g_free(key);
    PbgsWrite *write = g_new0(PbgsWrite, 1);
    if (value != NULL) {
        GError *error = NULL;
        write->value = g_variant_ref_sink(value);
        write->dbus_value = pbgs_to_dbus(value, &error);
        write->dbus_type = write->dbus_value ? g_strdup(g_variant_get_type_string(write->dbus_value)) : NULL;
        if (write->dbus_value == NULL) {
            g_warning("cannot write %s: %s", settings_key, error->message);
            g_error_free(error);
            pbgs_write_free(write);
            return FALSE;
        }
    }
    g_mutex_lock(&backend->lock);
    PbgsGroup *group;
    PbgsEntry *entry = entry_of_key(backend, settings_key, &group);
    gboolean ok = group != NULL && group->state != PBGS_GROUP_UNAVAILABLE;
    gboolean exists = entry != NULL;
    if (ok && value != NULL && entry != NULL) {
        ok = entry->writable && (entry->value == NULL || g_variant_is_of_type(write->dbus_value, g_variant_get_type(entry->value)));
        if (entry->writable && !ok)
            g_warning("cannot write %s: propbus has it as '%s', the schema says '%s'", settings_key,
                      g_variant_get_type_string(entry->value), g_variant_get_type_string(value));
    }
    if (ok) {
        PbgsWrite *before = pbgs_effective(backend, settings_key);
        GVariant *shown = before ? before->dbus_value : pbgs_visible(entry);
        *effect = *effect || !(value == NULL ? shown == NULL : (shown != NULL && g_variant_equal(shown, write->dbus_value)));
    }
    g_mutex_unlock(&backend->lock);
    if (!ok) {
        pbgs_write_free(write);
        return FALSE;
    }
    if (value != NULL && !exists) schema_facts(backend, settings_key, g_variant_get_type(value), write);
    g_hash_table_replace(changes, g_strdup(settings_key), write);
    return TRUE;
}

static GHashTable *new_changes(void) {
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, pbgs_write_free);
}

static void queue(PbgsBackend *backend, GHashTable *changes) {
    g_mutex_lock(&backend->lock);
    pbgs_queue(backend, changes);
    g_mutex_unlock(&backend->lock);
    g_hash_table_unref(changes);
}

static gboolean backend_write(GSettingsBackend *settings, const gchar *key, GVariant *value, gpointer origin_tag) {
    PbgsBackend *backend = self(settings);
    GHashTable *changes = new_changes();
    gboolean effect = FALSE;
    if (!prepare(backend, key, value, changes, &effect)) {
        g_hash_table_unref(changes);
        return FALSE;
    }
    queue(backend, changes);
    if (effect) g_settings_backend_changed(settings, key, origin_tag);
    return TRUE;
}

typedef struct {
    PbgsBackend *backend;
    GHashTable *changes;
    gboolean ok;
    gboolean effect;
} TreeWrite;

static gboolean prepare_tree_key(gpointer key, gpointer value, gpointer data) {
    TreeWrite *tree = data;
    tree->ok = prepare(tree->backend, key, value, tree->changes, &tree->effect);
    return !tree->ok;
}

/* GSettings' delay-apply: every key in one batch (one Apply), or none when one is refused. */
static gboolean backend_write_tree(GSettingsBackend *settings, GTree *tree, gpointer origin_tag) {
    PbgsBackend *backend = self(settings);
    if (g_tree_nnodes(tree) == 0) return TRUE;
    TreeWrite write = {backend, new_changes(), TRUE, FALSE};
    g_tree_foreach(tree, prepare_tree_key, &write);
    if (!write.ok) {
        g_hash_table_unref(write.changes);
        return FALSE;
    }
    queue(backend, write.changes);
    if (write.effect) g_settings_backend_changed_tree(settings, tree, origin_tag);
    return TRUE;
}

static void backend_reset(GSettingsBackend *settings, const gchar *key, gpointer origin_tag) {
    PbgsBackend *backend = self(settings);
    GHashTable *changes = new_changes();
    gboolean effect = FALSE;
    if (!prepare(backend, key, NULL, changes, &effect)) {
        g_hash_table_unref(changes);
        return;
    }
    queue(backend, changes);
    if (effect) g_settings_backend_changed(settings, key, origin_tag);
}

static gboolean backend_get_writable(GSettingsBackend *settings, const gchar *key) {
    PbgsBackend *backend = self(settings);
    g_mutex_lock(&backend->lock);
    PbgsGroup *group;
    PbgsEntry *entry = entry_of_key(backend, key, &group);
    gboolean writable = group != NULL && group->state != PBGS_GROUP_UNAVAILABLE && (entry == NULL || entry->writable);
    g_mutex_unlock(&backend->lock);
    return writable;
}

static void backend_subscribe(GSettingsBackend *settings, const gchar *path) {
    PbgsBackend *backend = self(settings);
    g_mutex_lock(&backend->lock);
    PbgsGroup *group = pbgs_group_for_path(backend, path, TRUE);
    if (group != NULL) group->subscriptions++;
    g_mutex_unlock(&backend->lock);
}

static gboolean writes_into(PbgsBackend *backend, GHashTable *writes, const gchar *path) {
    if (writes == NULL) return FALSE;
    GHashTableIter iter;
    gpointer key;
    g_hash_table_iter_init(&iter, writes);
    while (g_hash_table_iter_next(&iter, &key, NULL))
        if (g_str_has_prefix(key, path) && strchr((const gchar *) key + strlen(path), '/') == NULL) return TRUE;
    (void) backend;
    return FALSE;
}

static void backend_unsubscribe(GSettingsBackend *settings, const gchar *path) {
    PbgsBackend *backend = self(settings);
    g_mutex_lock(&backend->lock);
    PbgsGroup *group = pbgs_group_for_path(backend, path, FALSE);
    if (group != NULL && group->subscriptions > 0 && --group->subscriptions == 0
        && !writes_into(backend, backend->pending, path) && !writes_into(backend, backend->in_flight, path))
        pbgs_group_drop(backend, group);
    g_mutex_unlock(&backend->lock);
}

static void backend_sync(GSettingsBackend *settings) {
    PbgsBackend *backend = self(settings);
    gint64 deadline = g_get_monotonic_time() + PBGS_WAIT_SECONDS * G_TIME_SPAN_SECOND;
    g_mutex_lock(&backend->lock);
    while ((backend->pending != NULL || backend->in_flight != NULL) && g_cond_wait_until(&backend->cond, &backend->lock, deadline)) {}
    g_mutex_unlock(&backend->lock);
}

static GPermission *backend_get_permission(GSettingsBackend *settings, const gchar *path) {
    (void) settings;
    (void) path;
    return g_simple_permission_new(TRUE);
}

static void free_weak_ref(gpointer data) {
    g_weak_ref_clear(data);
    g_free(data);
}

static void pbgs_backend_init(PbgsBackend *backend) {
    g_mutex_init(&backend->lock);
    g_cond_init(&backend->cond);
    backend->groups = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, pbgs_group_free);
    backend->loads = g_hash_table_new(g_direct_hash, g_direct_equal);
    backend->in_flight_serials = g_hash_table_new(g_direct_hash, g_direct_equal);
    backend->names = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, pbgs_name_free);

    GError *error = NULL;
    gchar *address = g_dbus_address_get_for_bus_sync(G_BUS_TYPE_SESSION, NULL, &error);
    if (address != NULL)
        backend->bus = g_dbus_connection_new_for_address_sync(address, G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT
                                                              | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION, NULL, NULL, &error);
    g_free(address);
    if (backend->bus == NULL) {
        g_warning("propbus settings cannot reach the session bus: %s", error ? error->message : "no address");
        g_clear_error(&error);
        return;
    }
    GWeakRef *weak = g_new0(GWeakRef, 1);
    g_weak_ref_init(weak, backend);
    backend->filter = g_dbus_connection_add_filter(backend->bus, pbgs_filter, weak, free_weak_ref);
    g_mutex_lock(&backend->lock);
    pbgs_add_match(backend, "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',"
                            "member='NameOwnerChanged',arg0='" PBGS_BUS_NAME "'", TRUE);
    pbgs_add_match(backend, "type='signal',sender='" PBGS_BUS_NAME "',path='" PBGS_ROOT_PATH "',"
                            "interface='" PBGS_MANAGER_INTERFACE "',member='LocksChanged'", TRUE);
    pbgs_add_match(backend, "type='signal',sender='" PBGS_BUS_NAME "',path='" PBGS_ROOT_PATH "',"
                            "interface='org.freedesktop.DBus.ObjectManager'", TRUE);
    /* Answered in the filter, in order with NameOwnerChanged. */
    GDBusMessage *message = g_dbus_message_new_method_call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                           "org.freedesktop.DBus", "GetNameOwner");
    g_dbus_message_set_body(message, g_variant_new("(s)", PBGS_BUS_NAME));
    pbgs_send(backend, message, &backend->owner_serial);
    g_object_unref(message);
    g_mutex_unlock(&backend->lock);
}

static void pbgs_backend_finalize(GObject *object) {
    PbgsBackend *backend = (PbgsBackend *) object;
    if (backend->bus != NULL) {
        g_dbus_connection_remove_filter(backend->bus, backend->filter);
        g_dbus_connection_close_sync(backend->bus, NULL, NULL);
        g_object_unref(backend->bus);
    }
    g_hash_table_unref(backend->groups);
    g_hash_table_unref(backend->loads);
    g_hash_table_unref(backend->in_flight_serials);
    g_clear_pointer(&backend->pending, g_hash_table_unref);
    g_clear_pointer(&backend->in_flight, g_hash_table_unref);
    g_clear_pointer(&backend->schema_paths, g_hash_table_unref);
    g_hash_table_unref(backend->names);
    g_free(backend->in_flight_error);
    g_free(backend->owner);
    g_mutex_clear(&backend->lock);
    g_cond_clear(&backend->cond);
    G_OBJECT_CLASS(pbgs_backend_parent_class)->finalize(object);
}

static void pbgs_backend_class_init(PbgsBackendClass *class) {
    G_OBJECT_CLASS(class)->finalize = pbgs_backend_finalize;
    class->read = backend_read;
    class->read_user_value = backend_read_user_value;
    class->write = backend_write;
    class->write_tree = backend_write_tree;
    class->reset = backend_reset;
    class->get_writable = backend_get_writable;
    class->subscribe = backend_subscribe;
    class->unsubscribe = backend_unsubscribe;
    class->sync = backend_sync;
    class->get_permission = backend_get_permission;
}

/* Below dconf (100), so installing the package changes no one's backend; above the memory
 * and keyfile backends (10). GSETTINGS_BACKEND=propbus selects it. */
#define PBGS_PRIORITY 50

void pbgs_backend_register(GIOModule *module) {
    /* The type lives as long as the process: GIO never unloads a module it used. */
    g_type_module_use(G_TYPE_MODULE(module));
    g_io_extension_point_implement(G_SETTINGS_BACKEND_EXTENSION_POINT_NAME, pbgs_backend_get_type(), "propbus", PBGS_PRIORITY);
}
