/* The local copy of the daemon's keys, one group (GSettings path) at a time.
 *
 * Everything from the bus arrives in the filter (pbgs_filter), which runs in GDBus's worker
 * thread for every incoming message in the order the bus delivered them: so the application
 * needs no main loop for the copy to follow the daemon, and a ListProperties reply and the
 * signals around it are applied in the order the daemon sent them. The filter never blocks on
 * the bus; it only sends (a reload) and answers readers through the condition variable. */
#include "backend.h"

#include <string.h>

void pbgs_entry_free(gpointer data) {
    PbgsEntry *entry = data;
    g_clear_pointer(&entry->value, g_variant_unref);
    g_clear_pointer(&entry->user_value, g_variant_unref);
    g_clear_pointer(&entry->definition_default, g_variant_unref);
    g_clear_pointer(&entry->metadata, g_variant_unref);
    g_free(entry);
}

void pbgs_name_free(gpointer data) {
    PbgsName *name = data;
    g_free(name->group);
    g_free(name->name);
    g_free(name);
}

const PbgsName *pbgs_name_of(PbgsBackend *backend, const gchar *settings_key) {
    PbgsName *found = g_hash_table_lookup(backend->names, settings_key);
    if (found != NULL) return found;
    found = g_new0(PbgsName, 1);
    gchar *key = pbgs_key_for_settings_key(settings_key);
    if (key != NULL && !pbgs_split_key(key, &found->group, &found->name)) found->group = NULL;
    g_free(key);
    g_hash_table_insert(backend->names, g_strdup(settings_key), found);
    return found;
}

void pbgs_group_free(gpointer data) {
    PbgsGroup *group = data;
    g_free(group->group);
    g_free(group->object_path);
    g_hash_table_unref(group->entries);
    g_ptr_array_unref(group->early_signals);
    g_free(group);
}

gboolean pbgs_send(PbgsBackend *backend, GDBusMessage *message, guint32 *serial) {
    GError *error = NULL;
    guint32 sent = 0;
    gboolean ok = backend->bus != NULL
        && g_dbus_connection_send_message(backend->bus, message, G_DBUS_SEND_MESSAGE_FLAGS_NONE, &sent, &error);
    if (!ok && error != NULL) {
        g_debug("cannot send %s: %s", g_dbus_message_get_member(message), error->message);
        g_error_free(error);
    }
    if (serial) *serial = ok ? sent : 0;
    return ok;
}

/* AddMatch or RemoveMatch, sent without waiting: the bus handles it before any call we send
 * after it, so a ListProperties sent next cannot miss a change made after it is answered. */
void pbgs_add_match(PbgsBackend *backend, const gchar *rule, gboolean add) {
    GDBusMessage *message = g_dbus_message_new_method_call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                           "org.freedesktop.DBus", add ? "AddMatch" : "RemoveMatch");
    g_dbus_message_set_body(message, g_variant_new("(s)", rule));
    g_dbus_message_set_flags(message, G_DBUS_MESSAGE_FLAGS_NO_REPLY_EXPECTED);
    pbgs_send(backend, message, NULL);
    g_object_unref(message);
}

static gchar *group_match_rule(PbgsGroup *group) {
    return g_strdup_printf("type='signal',sender='" PBGS_BUS_NAME "',path='%s',"
                           "interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',arg0='" PBGS_VALUES_INTERFACE "'",
                           group->object_path);
}

PbgsGroup *pbgs_group_named(PbgsBackend *backend, const gchar *name, gboolean create) {
    PbgsGroup *group = g_hash_table_lookup(backend->groups, name);
    if (group != NULL || !create) return group;
    group = g_new0(PbgsGroup, 1);
    group->group = g_strdup(name);
    group->object_path = pbgs_object_path_for_group(name);
    group->entries = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, pbgs_entry_free);
    group->early_signals = g_ptr_array_new_with_free_func((GDestroyNotify) g_variant_unref);
    group->state = PBGS_GROUP_LOADING;
    g_hash_table_insert(backend->groups, group->group, group);
    /* Subscribe first, then read: a change between the two would otherwise be lost. */
    gchar *rule = group_match_rule(group);
    pbgs_add_match(backend, rule, TRUE);
    g_free(rule);
    pbgs_group_load(backend, group);
    return group;
}

PbgsGroup *pbgs_group_for_path(PbgsBackend *backend, const gchar *settings_path, gboolean create) {
    gchar *name = pbgs_group_for_settings_path(settings_path);
    PbgsGroup *group = name ? pbgs_group_named(backend, name, create) : NULL;
    g_free(name);
    return group;
}

void pbgs_group_drop(PbgsBackend *backend, PbgsGroup *group) {
    gchar *rule = group_match_rule(group);
    pbgs_add_match(backend, rule, FALSE);
    g_free(rule);
    if (group->load_serial != 0) g_hash_table_remove(backend->loads, GUINT_TO_POINTER(group->load_serial));
    /* The table frees the group. */
    g_hash_table_remove(backend->groups, group->group);
}

/* Sends ListProperties for the group (its keys and those of its subgroups, which the reply's
 * reader skips), unless one is out: then one more follows it. */
void pbgs_group_load(PbgsBackend *backend, PbgsGroup *group) {
    if (group->load_serial != 0) {
        group->reload_wanted = TRUE;
        return;
    }
    GDBusMessage *message = g_dbus_message_new_method_call(PBGS_BUS_NAME, PBGS_ROOT_PATH, PBGS_MANAGER_INTERFACE, "ListProperties");
    gchar *prefix = g_strconcat(group->group, ".", NULL);
    g_dbus_message_set_body(message, g_variant_new("(s)", prefix));
    g_free(prefix);
    guint32 serial = 0;
    if (pbgs_send(backend, message, &serial)) {
        group->load_serial = serial;
        g_hash_table_insert(backend->loads, GUINT_TO_POINTER(serial), group);
    } else {
        group->state = PBGS_GROUP_UNAVAILABLE;
        g_cond_broadcast(&backend->cond);
    }
    g_object_unref(message);
}

void pbgs_reload_all(PbgsBackend *backend) {
    GHashTableIter iter;
    gpointer group;
    g_hash_table_iter_init(&iter, backend->groups);
    while (g_hash_table_iter_next(&iter, NULL, &group)) pbgs_group_load(backend, group);
}

/* Whether the group's entry for `name` has what a reader needs: a value, and when the value
 * is its definition's default, whether it is the user's or only the definition's. */
static gboolean entry_ready(PbgsGroup *group, const gchar *name) {
    PbgsEntry *entry = g_hash_table_lookup(group->entries, name);
    if (entry == NULL || !entry->stale) return TRUE;
    if (entry->value == NULL || entry->definition_default == NULL) return FALSE;
    return !g_variant_equal(entry->value, entry->definition_default);
}

void pbgs_wait_loaded(PbgsBackend *backend, PbgsGroup *group, const gchar *name) {
    gint64 deadline = g_get_monotonic_time() + PBGS_WAIT_SECONDS * G_TIME_SPAN_SECOND;
    gchar *group_name = g_strdup(group->group);
    for (;;) {
        /* The group may be dropped (unsubscribed) while we wait. */
        group = g_hash_table_lookup(backend->groups, group_name);
        if (group == NULL || group->state == PBGS_GROUP_UNAVAILABLE) break;
        gboolean waiting = group->state == PBGS_GROUP_LOADING
            || (name != NULL && group->load_serial != 0 && !entry_ready(group, name));
        if (!waiting) break;
        if (!g_cond_wait_until(&backend->cond, &backend->lock, deadline)) {
            g_debug("no answer from " PBGS_BUS_NAME " for %s within %d s", group_name, PBGS_WAIT_SECONDS);
            break;
        }
    }
    g_free(group_name);
}

static PbgsLayer layer_named(const gchar *name, gboolean is_set) {
    if (name == NULL) return is_set ? PBGS_LAYER_USER : PBGS_LAYER_DEFAULT;
    if (g_str_equal(name, "mandatory")) return PBGS_LAYER_MANDATORY;
    if (g_str_equal(name, "override")) return PBGS_LAYER_OVERRIDE;
    if (g_str_equal(name, "site")) return PBGS_LAYER_SITE;
    if (g_str_equal(name, "vendor")) return PBGS_LAYER_VENDOR;
    if (g_str_equal(name, "user")) return PBGS_LAYER_USER;
    return PBGS_LAYER_DEFAULT;
}

static PbgsEntry *entry_from_row(GVariant *value, GVariant *metadata) {
    PbgsEntry *entry = g_new0(PbgsEntry, 1);
    entry->value = g_variant_get_variant(value);
    gboolean is_set = TRUE, writable = TRUE;
    g_variant_lookup(metadata, "is_set", "b", &is_set);
    g_variant_lookup(metadata, "writable", "b", &writable);
    const gchar *layer = NULL;
    g_variant_lookup(metadata, "layer", "&s", &layer);
    entry->is_set = is_set;
    entry->writable = writable;
    entry->layer = layer_named(layer, is_set);
    entry->user_value = g_variant_lookup_value(metadata, "user_value", NULL);
    entry->definition_default = g_variant_lookup_value(metadata, "default", NULL);
    entry->metadata = g_variant_ref(metadata);
    return entry;
}

static gboolean same_value(GVariant *a, GVariant *b) {
    if (a == NULL || b == NULL) return a == b;
    return g_variant_equal(a, b);
}

static void notify_key(PbgsBackend *backend, PbgsGroup *group, const gchar *name, PbgsNotifyKind kind, GPtrArray *notifications) {
    gchar *key = pbgs_settings_key_for_key(group->group, name);
    if (key == NULL) return;
    /* A key this process is writing reads what it wrote until the write is answered; the
     * answer says whether that changed. */
    if (kind != PBGS_NOTIFY_CHANGED || pbgs_effective(backend, key) == NULL) pbgs_notify(notifications, kind, key, NULL);
    g_free(key);
}

/* A value the daemon announced for `name` (PropertiesChanged, InterfacesAdded). */
static void apply_change(PbgsBackend *backend, PbgsGroup *group, const gchar *name, GVariant *value, GPtrArray *notifications) {
    PbgsEntry *entry = g_hash_table_lookup(group->entries, name);
    if (entry == NULL) {
        entry = g_new0(PbgsEntry, 1);
        entry->writable = TRUE;
        entry->layer = PBGS_LAYER_USER;
        g_hash_table_insert(group->entries, g_strdup(name), entry);
    } else if (same_value(entry->value, value)) {
        return;
    }
    g_clear_pointer(&entry->value, g_variant_unref);
    entry->value = g_variant_ref(value);
    entry->stale = TRUE;
    pbgs_learn_from_own_write(backend, group, name, entry);
    if (!entry_ready(group, name)) pbgs_group_load(backend, group);
    notify_key(backend, group, name, PBGS_NOTIFY_CHANGED, notifications);
}

/* Every value of an `a{sv}` of the group's properties (PropertiesChanged, InterfacesAdded). */
static void apply_values(PbgsBackend *backend, PbgsGroup *group, GVariant *values, GPtrArray *notifications) {
    GVariantIter iter;
    const gchar *name;
    GVariant *value;
    g_variant_iter_init(&iter, values);
    while (g_variant_iter_next(&iter, "{&sv}", &name, &value)) {
        apply_change(backend, group, name, value, notifications);
        g_variant_unref(value);
    }
}

static void apply_properties_changed(PbgsBackend *backend, PbgsGroup *group, GVariant *body, GPtrArray *notifications) {
    GVariant *changed = NULL;
    const gchar **invalidated = NULL;
    g_variant_get(body, "(&s@a{sv}^a&s)", NULL, &changed, &invalidated);
    apply_values(backend, group, changed, notifications);
    /* Secret keys, deleted keys and signals too large to carry values: read them again. */
    if (invalidated != NULL && invalidated[0] != NULL) {
        for (const gchar **n = invalidated; *n; n++) {
            PbgsEntry *entry = g_hash_table_lookup(group->entries, *n);
            if (entry != NULL) entry->stale = TRUE;
        }
        pbgs_group_load(backend, group);
    }
    g_free(invalidated);
    g_variant_unref(changed);
}

/* The daemon's answer to a ListProperties: the group's keys replace the copy; what readers
 * would now read differently, and what became (not) writable, is announced. */
static void take_load_reply(PbgsBackend *backend, PbgsGroup *group, GDBusMessage *reply, GPtrArray *notifications) {
    gboolean first = group->state == PBGS_GROUP_LOADING;
    group->load_serial = 0;
    if (g_dbus_message_get_message_type(reply) == G_DBUS_MESSAGE_TYPE_ERROR) {
        g_debug("ListProperties for %s: %s", group->group, g_dbus_message_get_error_name(reply));
        if (first) group->state = PBGS_GROUP_UNAVAILABLE;
    } else {
        GHashTable *entries = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, pbgs_entry_free);
        GVariant *body = g_dbus_message_get_body(reply);
        if (body != NULL && g_variant_is_of_type(body, G_VARIANT_TYPE("(a(ssva{sv}))"))) {
            GVariant *rows = g_variant_get_child_value(body, 0);
            gsize prefix = strlen(group->group) + 1;
            GVariantIter iter;
            const gchar *key;
            GVariant *value, *metadata;
            g_variant_iter_init(&iter, rows);
            while (g_variant_iter_next(&iter, "(&s&s@v@a{sv})", &key, NULL, &value, &metadata)) {
                /* The prefix also lists the subgroups' keys. */
                if (strlen(key) > prefix && strchr(key + prefix, '.') == NULL)
                    g_hash_table_insert(entries, g_strdup(key + prefix), entry_from_row(value, metadata));
                g_variant_unref(value);
                g_variant_unref(metadata);
            }
            g_variant_unref(rows);
        }
        GHashTable *old = group->entries;
        group->entries = entries;
        gboolean announce = !first;
        group->state = PBGS_GROUP_LOADED;
        if (announce) {
            GHashTableIter iter;
            gpointer name, data;
            g_hash_table_iter_init(&iter, entries);
            while (g_hash_table_iter_next(&iter, &name, &data)) {
                PbgsEntry *now = data, *before = g_hash_table_lookup(old, name);
                /* A stale entry's value was announced when its signal came (readers wait for
                 * this reply to learn whether it is the user's): only what differs from what
                 * was announced is news. */
                gboolean announced = before != NULL && before->stale && same_value(before->value, now->value);
                if (before == NULL || (!announced && !same_value(pbgs_visible(before), pbgs_visible(now))))
                    notify_key(backend, group, name, PBGS_NOTIFY_CHANGED, notifications);
                if (before == NULL ? !now->writable : before->writable != now->writable)
                    notify_key(backend, group, name, PBGS_NOTIFY_WRITABLE, notifications);
            }
            g_hash_table_iter_init(&iter, old);
            while (g_hash_table_iter_next(&iter, &name, &data))
                if (!g_hash_table_contains(entries, name)) {
                    notify_key(backend, group, name, PBGS_NOTIFY_CHANGED, notifications);
                    if (!((PbgsEntry *) data)->writable) notify_key(backend, group, name, PBGS_NOTIFY_WRITABLE, notifications);
                }
        }
        g_hash_table_unref(old);
        /* What the daemon announced while the first load was out is applied in order after
         * it: a change the reply already holds sets the same value again, a later one wins. */
        for (guint i = 0; i < group->early_signals->len; i++)
            apply_properties_changed(backend, group, g_ptr_array_index(group->early_signals, i), notifications);
    }
    g_ptr_array_set_size(group->early_signals, 0);
    if (group->reload_wanted) {
        group->reload_wanted = FALSE;
        pbgs_group_load(backend, group);
    }
    g_cond_broadcast(&backend->cond);
}

static PbgsGroup *group_at_object_path(PbgsBackend *backend, const gchar *path) {
    gsize root = strlen(PBGS_ROOT_PATH);
    if (path == NULL || strncmp(path, PBGS_ROOT_PATH "/", root + 1) != 0) return NULL;
    gchar *name = g_strdup(path + root + 1);
    for (gchar *c = name; *c; c++)
        if (*c == '/') *c = '.';
    PbgsGroup *group = g_hash_table_lookup(backend->groups, name);
    g_free(name);
    return group;
}

static gboolean take_signal(PbgsBackend *backend, GDBusMessage *message, GPtrArray *notifications) {
    const gchar *sender = g_dbus_message_get_sender(message);
    const gchar *interface = g_dbus_message_get_interface(message);
    const gchar *member = g_dbus_message_get_member(message);
    const gchar *path = g_dbus_message_get_path(message);
    GVariant *body = g_dbus_message_get_body(message);
    if (sender == NULL || interface == NULL || member == NULL || body == NULL) return FALSE;

    if (g_str_equal(sender, "org.freedesktop.DBus") && g_str_equal(member, "NameOwnerChanged")
        && g_variant_is_of_type(body, G_VARIANT_TYPE("(sss)"))) {
        const gchar *name, *new_owner;
        g_variant_get(body, "(&s&s&s)", &name, NULL, &new_owner);
        if (!g_str_equal(name, PBGS_BUS_NAME)) return FALSE;
        g_free(backend->owner);
        backend->owner = new_owner[0] ? g_strdup(new_owner) : NULL;
        /* A restarted daemon: read everything again, and announce what differs. */
        if (backend->owner != NULL) pbgs_reload_all(backend);
        return TRUE;
    }
    if (backend->owner == NULL || !g_str_equal(sender, backend->owner)) return FALSE;

    if (g_str_equal(member, "PropertiesChanged") && g_variant_is_of_type(body, G_VARIANT_TYPE("(sa{sv}as)"))) {
        PbgsGroup *group = group_at_object_path(backend, path);
        const gchar *changed_interface;
        g_variant_get_child(body, 0, "&s", &changed_interface);
        if (group == NULL || !g_str_equal(changed_interface, PBGS_VALUES_INTERFACE)) return group != NULL;
        if (group->state == PBGS_GROUP_LOADING) g_ptr_array_add(group->early_signals, g_variant_ref(body));
        else apply_properties_changed(backend, group, body, notifications);
        return TRUE;
    }
    if (g_str_equal(interface, "org.freedesktop.DBus.ObjectManager") && g_str_equal(member, "InterfacesAdded")
        && g_variant_is_of_type(body, G_VARIANT_TYPE("(oa{sa{sv}})"))) {
        const gchar *object;
        GVariant *interfaces;
        g_variant_get(body, "(&o@a{sa{sv}})", &object, &interfaces);
        PbgsGroup *group = group_at_object_path(backend, object);
        GVariant *properties = group ? g_variant_lookup_value(interfaces, PBGS_VALUES_INTERFACE, G_VARIANT_TYPE("a{sv}")) : NULL;
        if (properties != NULL && group->state != PBGS_GROUP_LOADING) {
            apply_values(backend, group, properties, notifications);
        } else if (properties != NULL) {
            pbgs_group_load(backend, group);
        }
        if (properties) g_variant_unref(properties);
        g_variant_unref(interfaces);
        return TRUE;
    }
    if (g_str_equal(interface, "org.freedesktop.DBus.ObjectManager") && g_str_equal(member, "InterfacesRemoved")
        && g_variant_is_of_type(body, G_VARIANT_TYPE("(oas)"))) {
        const gchar *object;
        g_variant_get_child(body, 0, "&o", &object);
        PbgsGroup *group = group_at_object_path(backend, object);
        if (group != NULL) pbgs_group_load(backend, group);
        return TRUE;
    }
    if (g_str_equal(interface, PBGS_MANAGER_INTERFACE) && g_str_equal(member, "LocksChanged")
        && g_variant_is_of_type(body, G_VARIANT_TYPE("(as)"))) {
        GVariantIter *keys;
        const gchar *key;
        g_variant_get(body, "(as)", &keys);
        while (g_variant_iter_next(keys, "&s", &key)) {
            gchar *group_name, *name;
            if (!pbgs_split_key(key, &group_name, &name)) continue;
            PbgsGroup *group = g_hash_table_lookup(backend->groups, group_name);
            if (group != NULL) pbgs_group_load(backend, group);
            g_free(group_name);
            g_free(name);
        }
        g_variant_iter_free(keys);
        return TRUE;
    }
    return FALSE;
}

GDBusMessage *pbgs_filter(GDBusConnection *bus, GDBusMessage *message, gboolean incoming, gpointer data) {
    (void) bus;
    if (!incoming) return message;
    PbgsBackend *backend = g_weak_ref_get(data);
    if (backend == NULL) return message;
    GPtrArray *notifications = g_ptr_array_new();
    gboolean taken = FALSE;
    g_mutex_lock(&backend->lock);
    switch (g_dbus_message_get_message_type(message)) {
    case G_DBUS_MESSAGE_TYPE_METHOD_RETURN:
    case G_DBUS_MESSAGE_TYPE_ERROR: {
        gpointer serial = GUINT_TO_POINTER(g_dbus_message_get_reply_serial(message));
        PbgsGroup *group = g_hash_table_lookup(backend->loads, serial);
        if (group != NULL) {
            g_hash_table_remove(backend->loads, serial);
            take_load_reply(backend, group, message, notifications);
            taken = TRUE;
        } else {
            taken = pbgs_take_reply(backend, message, notifications);
        }
        break;
    }
    case G_DBUS_MESSAGE_TYPE_SIGNAL:
        taken = take_signal(backend, message, notifications);
        break;
    default:
        break;
    }
    g_mutex_unlock(&backend->lock);
    pbgs_emit(backend, notifications);
    g_object_unref(backend);
    if (!taken) return message;
    g_object_unref(message);
    return NULL;
}
