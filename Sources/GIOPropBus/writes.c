/* Writes, as dconf's engine makes them: GSettings is answered at once and reads what it wrote,
 * while one batch at a time is out to the daemon and later writes merge into the next.
 *
 * A batch is one call where it can be: a Set for one key, a Reset for one reset, else one
 * Manager.Apply (atomic: every key or none), preceded by a CreateProperty for each key the
 * daemon does not have yet (typed by the schema). The daemon sends a change's
 * PropertiesChanged before its reply, so when the reply comes the copy already holds the
 * daemon's value: a key is announced again only if that is not what the application was
 * shown (the write failed, or someone else's write came after it). */
#include "backend.h"

void pbgs_write_free(gpointer data) {
    PbgsWrite *write = data;
    g_clear_pointer(&write->value, g_variant_unref);
    g_clear_pointer(&write->dbus_value, g_variant_unref);
    g_clear_pointer(&write->new_default, g_variant_unref);
    g_free(write->dbus_type);
    g_free(write->summary);
    g_free(write);
}

PbgsWrite *pbgs_effective(PbgsBackend *backend, const gchar *settings_key) {
    PbgsWrite *write = NULL;
    if (backend->pending != NULL) write = g_hash_table_lookup(backend->pending, settings_key);
    if (write == NULL && backend->in_flight != NULL) write = g_hash_table_lookup(backend->in_flight, settings_key);
    return write;
}

/* What GSettings reads for an entry, in D-Bus form: NULL when only the definition's default
 * stands (the application's schema has its own). */
GVariant *pbgs_visible(PbgsEntry *entry) {
    if (entry == NULL || entry->value == NULL) return NULL;
    return entry->is_set || entry->layer != PBGS_LAYER_DEFAULT ? entry->value : NULL;
}

/* Our own change came back: its outcome is known without asking (a Set makes the value the
 * user's; a Reset leaves the definition's default, or a layer's value that shows through). */
void pbgs_learn_from_own_write(PbgsBackend *backend, PbgsGroup *group, const gchar *name, PbgsEntry *entry) {
    if (backend->in_flight == NULL) return;
    gchar *key = pbgs_settings_key_for_key(group->group, name);
    PbgsWrite *write = key ? g_hash_table_lookup(backend->in_flight, key) : NULL;
    g_free(key);
    if (write == NULL) return;
    if (write->value != NULL && g_variant_equal(write->dbus_value, entry->value)) {
        entry->is_set = TRUE;
        entry->layer = PBGS_LAYER_USER;
        entry->stale = FALSE;
    } else if (write->value == NULL && entry->definition_default != NULL && g_variant_equal(entry->value, entry->definition_default)) {
        entry->is_set = FALSE;
        entry->layer = PBGS_LAYER_DEFAULT;
        entry->stale = FALSE;
    }
}

static GDBusMessage *call(const gchar *path, const gchar *interface, const gchar *member, GVariant *body) {
    GDBusMessage *message = g_dbus_message_new_method_call(PBGS_BUS_NAME, path, interface, member);
    g_dbus_message_set_body(message, body);
    return message;
}

static void send_call(PbgsBackend *backend, GDBusMessage *message) {
    guint32 serial = 0;
    if (pbgs_send(backend, message, &serial)) {
        g_hash_table_add(backend->in_flight_serials, GUINT_TO_POINTER(serial));
    } else if (backend->in_flight_error == NULL) {
        backend->in_flight_error = g_strdup("the bus connection is closed");
    }
    g_object_unref(message);
}

/* The key's entry in the copy, or NULL; `group` and `name` get the key's parts. */
static PbgsEntry *entry_for(PbgsBackend *backend, const gchar *settings_key, PbgsGroup **group, const gchar **name) {
    const PbgsName *parts = pbgs_name_of(backend, settings_key);
    *group = parts->group ? pbgs_group_named(backend, parts->group, FALSE) : NULL;
    *name = parts->name;
    return *group ? g_hash_table_lookup((*group)->entries, parts->name) : NULL;
}

/* Whether writing `write` to `entry` would change nothing while the key holds no value of the
 * user's (it reads its default, or a site or vendor value, equal to it): GSettings' writes are
 * the user's, as in dconf, so the value is stored by registering the key again (``keep_call``). */
static gboolean needs_keep(PbgsEntry *entry, PbgsWrite *write) {
    return !entry->is_set && !entry->stale && entry->metadata != NULL && entry->value != NULL
        && g_variant_equal(entry->value, write->dbus_value);
}

/* CreateProperty with the key's own definition (as ListProperties said it) and the value as
 * `value`, which the daemon stores only when none is: nothing anyone reads changes. */
static GDBusMessage *keep_call(const gchar *key, PbgsEntry *entry, PbgsWrite *write) {
    static const gchar *const names[] = {"description", "minimum", "maximum", "choices", "persistent", "writable", "writers", "secret", "scope", NULL};
    GVariantBuilder options;
    g_variant_builder_init(&options, G_VARIANT_TYPE("a{sv}"));
    for (const gchar *const *name = names; *name; name++) {
        GVariant *value = g_variant_lookup_value(entry->metadata, *name, NULL);
        if (value != NULL) {
            g_variant_builder_add(&options, "{sv}", *name, value);
            g_variant_unref(value);
        }
    }
    g_variant_builder_add(&options, "{sv}", "value", write->dbus_value);
    GVariant *definition_default = entry->definition_default ? entry->definition_default : entry->value;
    return call(PBGS_ROOT_PATH, PBGS_MANAGER_INTERFACE, "CreateProperty",
                g_variant_new("(ss@va{sv})", key, g_variant_get_type_string(entry->value),
                              g_variant_new_variant(definition_default), &options));
}

static void send_batch(PbgsBackend *backend) {
    GVariantBuilder sets, resets;
    g_variant_builder_init(&sets, G_VARIANT_TYPE("a{sv}"));
    g_variant_builder_init(&resets, G_VARIANT_TYPE("as"));
    guint count = 0;
    GDBusMessage *single = NULL;
    GHashTableIter iter;
    gpointer settings_key, data;
    g_hash_table_iter_init(&iter, backend->in_flight);
    while (g_hash_table_iter_next(&iter, &settings_key, &data)) {
        PbgsWrite *write = data;
        PbgsGroup *group;
        const gchar *name;
        PbgsEntry *entry = entry_for(backend, settings_key, &group, &name);
        const gchar *group_name = pbgs_name_of(backend, settings_key)->group;
        /* A reset of a key the daemon does not have changes nothing. */
        if (group_name == NULL || (write->value == NULL && entry == NULL)) continue;
        gchar *key = g_strconcat(group_name, ".", name, NULL);
        if (write->value != NULL && entry == NULL) {
            /* Created holding the value: a Set of a value equal to the new key's default would
             * change nothing and leave the key without a value of the user's. */
            GVariantBuilder options;
            g_variant_builder_init(&options, G_VARIANT_TYPE("a{sv}"));
            if (write->summary != NULL) g_variant_builder_add(&options, "{sv}", "description", g_variant_new_string(write->summary));
            g_variant_builder_add(&options, "{sv}", "value", write->dbus_value);
            send_call(backend, call(PBGS_ROOT_PATH, PBGS_MANAGER_INTERFACE, "CreateProperty",
                                    g_variant_new("(ss@va{sv})", key, write->dbus_type,
                                                  g_variant_new_variant(write->new_default), &options)));
        } else if (write->value != NULL && needs_keep(entry, write)) {
            send_call(backend, keep_call(key, entry, write));
        }
        gchar *object_path = pbgs_object_path_for_group(group_name);
        if (single != NULL) g_clear_object(&single);
        if (write->value != NULL) {
            g_variant_builder_add(&sets, "{sv}", key, write->dbus_value);
            single = call(object_path, "org.freedesktop.DBus.Properties", "Set",
                          g_variant_new("(ss@v)", PBGS_VALUES_INTERFACE, name, g_variant_new_variant(write->dbus_value)));
        } else {
            g_variant_builder_add(&resets, "s", key);
            single = call(object_path, PBGS_VALUES_INTERFACE, "Reset", g_variant_new("(s)", name));
        }
        count++;
        g_free(object_path);
        g_free(key);
    }
    if (count == 1) {
        send_call(backend, g_steal_pointer(&single));
        g_variant_builder_clear(&sets);
        g_variant_builder_clear(&resets);
    } else {
        g_clear_object(&single);
        if (count > 1) send_call(backend, call(PBGS_ROOT_PATH, PBGS_MANAGER_INTERFACE, "Apply", g_variant_new("(a{sv}as)", &sets, &resets)));
        else {
            g_variant_builder_clear(&sets);
            g_variant_builder_clear(&resets);
        }
    }
}

static void finish_batch(PbgsBackend *backend, GPtrArray *notifications);

/* Sends the pending writes when nothing is out. */
static void manage_queue(PbgsBackend *backend, GPtrArray *notifications) {
    if (backend->pending != NULL && backend->in_flight == NULL) {
        backend->in_flight = g_steal_pointer(&backend->pending);
        send_batch(backend);
        if (g_hash_table_size(backend->in_flight_serials) == 0) finish_batch(backend, notifications);
    }
    if (backend->pending == NULL && backend->in_flight == NULL) g_cond_broadcast(&backend->cond);
}

void pbgs_queue(PbgsBackend *backend, GHashTable *changes) {
    if (backend->pending == NULL)
        backend->pending = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, pbgs_write_free);
    GHashTableIter iter;
    gpointer key, write;
    g_hash_table_iter_init(&iter, changes);
    while (g_hash_table_iter_next(&iter, &key, &write)) {
        g_hash_table_iter_steal(&iter);
        g_hash_table_replace(backend->pending, key, write);
    }
    manage_queue(backend, NULL);
}

/* The batch out was answered (every call of it): announce each key whose value is not what
 * the application was shown, and send what waited. */
static void finish_batch(PbgsBackend *backend, GPtrArray *notifications) {
    GHashTable *done = g_steal_pointer(&backend->in_flight);
    gchar *error = g_steal_pointer(&backend->in_flight_error);
    if (error != NULL) g_warning("failed to write to " PBGS_BUS_NAME ": %s", error);
    GHashTableIter iter;
    gpointer settings_key, data;
    g_hash_table_iter_init(&iter, done);
    while (g_hash_table_iter_next(&iter, &settings_key, &data)) {
        PbgsWrite *write = data;
        if (backend->pending != NULL && g_hash_table_contains(backend->pending, settings_key)) continue;
        PbgsGroup *group;
        const gchar *name;
        PbgsEntry *entry = entry_for(backend, settings_key, &group, &name);
        if (error == NULL && entry != NULL && write->value != NULL && entry->value != NULL && g_variant_equal(entry->value, write->dbus_value)) {
            /* Stored as the user's (a Set, or a keep that announced nothing). */
            entry->is_set = TRUE;
            if (entry->layer != PBGS_LAYER_MANDATORY && entry->layer != PBGS_LAYER_OVERRIDE) entry->layer = PBGS_LAYER_USER;
        }
        GVariant *now = pbgs_visible(entry);
        gboolean same = write->value == NULL ? now == NULL : (now != NULL && g_variant_equal(now, write->dbus_value));
        if ((error != NULL || !same) && notifications != NULL) pbgs_notify(notifications, PBGS_NOTIFY_CHANGED, settings_key, NULL);
    }
    g_hash_table_unref(done);
    g_free(error);
    manage_queue(backend, notifications);
}

gboolean pbgs_take_reply(PbgsBackend *backend, GDBusMessage *reply, GPtrArray *notifications) {
    guint32 serial = g_dbus_message_get_reply_serial(reply);
    if (serial == backend->owner_serial && serial != 0) {
        backend->owner_serial = 0;
        GVariant *body = g_dbus_message_get_body(reply);
        g_free(backend->owner);
        backend->owner = NULL;
        if (g_dbus_message_get_message_type(reply) == G_DBUS_MESSAGE_TYPE_METHOD_RETURN && body && g_variant_is_of_type(body, G_VARIANT_TYPE("(s)")))
            g_variant_get(body, "(s)", &backend->owner);
        return TRUE;
    }
    if (!g_hash_table_remove(backend->in_flight_serials, GUINT_TO_POINTER(serial))) return FALSE;
    if (g_dbus_message_get_message_type(reply) == G_DBUS_MESSAGE_TYPE_ERROR && backend->in_flight_error == NULL) {
        GVariant *body = g_dbus_message_get_body(reply);
        const gchar *text = NULL;
        if (body != NULL && g_variant_n_children(body) > 0 && g_variant_is_of_type(body, G_VARIANT_TYPE("(s)")))
            g_variant_get(body, "(&s)", &text);
        backend->in_flight_error = g_strdup_printf("%s: %s", g_dbus_message_get_error_name(reply), text ? text : "");
    }
    if (g_hash_table_size(backend->in_flight_serials) == 0 && backend->in_flight != NULL) finish_batch(backend, notifications);
    return TRUE;
}
