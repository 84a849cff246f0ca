/* The reversible mapping between GSettings paths and propbus keys (docs/dconf.md, "Names").
 *
 *   /org/gnome/desktop/interface/font-name  <->  org.gnome.desktop.interface.font_name
 *
 * Each path segment (and the key's name) becomes one key segment. A segment made of ASCII
 * letters and digits in runs joined by single '-' is written with '_' for '-' (the readable
 * form: never empty, never starting or ending with '_', never holding "__"). Any other segment,
 * and one the readable form would make reserved (a name starting with a digit, a first
 * segment "bindings", the names of the Values interface's methods), is written in the escaped
 * form: '_' then each byte, letters and digits as they are and every other byte as '_' and two
 * lower-case hex digits ("bad:name" -> "_bad_3aname"). The escaped form always starts with
 * '_', so the two never meet, and a key segment in neither canonical form (propbus keys made
 * otherwise, such as "a__b") has no GSettings path. propctl's GSettingsPaths (Swift) implements
 * the same rules; the integration tests hold the two to the same keys. */
#include "backend.h"

#include <string.h>

static gboolean is_alnum(guchar c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static gboolean is_reserved(const gchar *readable, gsize length, gboolean first, gboolean name) {
    static const gchar *const methods[] = {"Reset", "GetWithRevision", "CompareAndSet", NULL};
    if (name) {
        if (readable[0] >= '0' && readable[0] <= '9') return TRUE;
        for (const gchar *const *m = methods; *m; m++)
            if (strlen(*m) == length && memcmp(*m, readable, length) == 0) return TRUE;
        return FALSE;
    }
    return first && length == 8 && memcmp(readable, "bindings", 8) == 0;
}

/* Whether `segment` (not NUL-terminated) has the readable form: alnum runs joined by single '-'. */
static gboolean is_readable(const gchar *segment, gsize length) {
    if (length == 0 || segment[0] == '-' || segment[length - 1] == '-') return FALSE;
    for (gsize i = 0; i < length; i++) {
        guchar c = (guchar) segment[i];
        if (c == '-') {
            if (segment[i + 1] == '-') return FALSE;
        } else if (!is_alnum(c)) {
            return FALSE;
        }
    }
    return TRUE;
}

static void append_segment(GString *out, const gchar *segment, gsize length, gboolean first, gboolean name) {
    if (is_readable(segment, length) && !is_reserved(segment, length, first, name)) {
        for (gsize i = 0; i < length; i++) g_string_append_c(out, segment[i] == '-' ? '_' : segment[i]);
        return;
    }
    g_string_append_c(out, '_');
    for (gsize i = 0; i < length; i++) {
        guchar c = (guchar) segment[i];
        if (is_alnum(c)) g_string_append_c(out, (gchar) c);
        else g_string_append_printf(out, "_%02x", c);
    }
}

static gint hex_digit(gchar c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Appends the GSettings segment a key segment stands for; FALSE when `segment` is in neither
 * canonical form (re-encoding what it decodes to must give it back). */
static gboolean append_decoded(GString *out, const gchar *segment, gsize length, gboolean first, gboolean name) {
    gsize start = out->len;
    if (length == 0) return FALSE;
    if (segment[0] != '_') {
        for (gsize i = 0; i < length; i++) {
            guchar c = (guchar) segment[i];
            if (c == '_') g_string_append_c(out, '-');
            else if (is_alnum(c)) g_string_append_c(out, (gchar) c);
            else return FALSE;
        }
    } else {
        for (gsize i = 1; i < length; i++) {
            guchar c = (guchar) segment[i];
            if (is_alnum(c)) {
                g_string_append_c(out, (gchar) c);
            } else if (c == '_' && i + 2 < length && hex_digit(segment[i + 1]) >= 0 && hex_digit(segment[i + 2]) >= 0) {
                g_string_append_c(out, (gchar) (hex_digit(segment[i + 1]) * 16 + hex_digit(segment[i + 2])));
                i += 2;
            } else {
                return FALSE;
            }
        }
    }
    /* Canonical only: the segment must be what encoding the result gives. */
    GString *again = g_string_new(NULL);
    append_segment(again, out->str + start, out->len - start, first, name);
    gboolean same = again->len == length && memcmp(again->str, segment, length) == 0;
    g_string_free(again, TRUE);
    if (same) {
        const gchar *decoded = out->str + start;
        same = memchr(decoded, '/', out->len - start) == NULL && memchr(decoded, '\0', out->len - start) == NULL;
    }
    return same;
}

/* "/a/b/" (a path) or "/a/b/c" (a key): the key's segments joined by '.', or NULL when the
 * path has an empty segment, no segment (a key right below "/") or maps past 255 bytes. */
static gchar *map_path(const gchar *path, gboolean is_key) {
    if (path == NULL || path[0] != '/') return NULL;
    GString *out = g_string_new(NULL);
    const gchar *segment = path + 1;
    gboolean first = TRUE;
    guint count = 0;
    for (;;) {
        const gchar *slash = strchr(segment, '/');
        gsize length = slash ? (gsize) (slash - segment) : strlen(segment);
        gboolean last = slash == NULL;
        if (last && !is_key) {
            if (length != 0) goto fail;  /* a path ends with '/' */
            break;
        }
        if (length == 0) goto fail;
        if (!first) g_string_append_c(out, '.');
        append_segment(out, segment, length, first, is_key && last);
        first = FALSE;
        count++;
        if (last) break;
        segment = slash + 1;
    }
    if (count < (is_key ? 2u : 1u) || out->len > PBGS_MAX_KEY_LENGTH) goto fail;
    return g_string_free(out, FALSE);
fail:
    g_string_free(out, TRUE);
    return NULL;
}

gchar *pbgs_key_for_settings_key(const gchar *settings_key) {
    return map_path(settings_key, TRUE);
}

gchar *pbgs_group_for_settings_path(const gchar *settings_path) {
    return map_path(settings_path, FALSE);
}

gboolean pbgs_split_key(const gchar *key, gchar **group, gchar **name) {
    const gchar *dot = strrchr(key, '.');
    if (dot == NULL || dot == key || dot[1] == '\0') return FALSE;
    *group = g_strndup(key, (gsize) (dot - key));
    *name = g_strdup(dot + 1);
    return TRUE;
}

/* "a.b" -> "/a/b/", or "/a/b/c" with a name; NULL when a segment is in neither form. */
static gchar *settings_path(const gchar *group, const gchar *name) {
    GString *out = g_string_new("/");
    const gchar *segment = group;
    gboolean first = TRUE;
    for (;;) {
        const gchar *dot = strchr(segment, '.');
        gsize length = dot ? (gsize) (dot - segment) : strlen(segment);
        if (!append_decoded(out, segment, length, first, FALSE)) goto fail;
        g_string_append_c(out, '/');
        first = FALSE;
        if (dot == NULL) break;
        segment = dot + 1;
    }
    if (name != NULL && !append_decoded(out, name, strlen(name), FALSE, TRUE)) goto fail;
    return g_string_free(out, FALSE);
fail:
    g_string_free(out, TRUE);
    return NULL;
}

gchar *pbgs_settings_key_for_key(const gchar *group, const gchar *name) {
    return settings_path(group, name);
}

gchar *pbgs_settings_path_for_group(const gchar *group) {
    return settings_path(group, NULL);
}

gchar *pbgs_object_path_for_group(const gchar *group) {
    gchar *path = g_strconcat(PBGS_ROOT_PATH "/", group, NULL);
    for (gchar *c = path + strlen(PBGS_ROOT_PATH); *c; c++)
        if (*c == '.') *c = '/';
    return path;
}
