/* GVariant values in D-Bus form and back (docs/dconf.md, "Types").
 *
 * A GVariant type made of D-Bus types is its own D-Bus type. The types D-Bus lacks:
 *   - a maybe type mT is an array of at most one one-field struct, a(T): nothing is [],
 *     just x is [(x)];
 *   - the empty tuple (), a dict entry outside an array and handles (h) have no D-Bus form and
 *     are refused.
 * Reading back is guided by the type the schema expects, so a key whose schema type is a(T)
 * (an array of one-element tuples) reads as what it is. Inside a variant there is no schema:
 * there an array of one-field structs reads as a maybe, so a(T) values inside a variant are
 * refused when written (propctl's GVariantValue applies the same rules to dconf's text). */
#include "backend.h"

#include <string.h>

static gboolean append_dbus_type(GString *out, const GVariantType *type, gboolean in_array, GError **error) {
    if (g_variant_type_is_maybe(type)) {
        g_string_append(out, "a(");
        if (!append_dbus_type(out, g_variant_type_element(type), FALSE, error)) return FALSE;
        g_string_append_c(out, ')');
        return TRUE;
    }
    if (g_variant_type_is_array(type)) {
        g_string_append_c(out, 'a');
        return append_dbus_type(out, g_variant_type_element(type), TRUE, error);
    }
    if (g_variant_type_is_dict_entry(type)) {
        if (!in_array) {
            g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                                "a dict entry outside an array has no D-Bus form");
            return FALSE;
        }
        g_string_append_c(out, '{');
        if (!append_dbus_type(out, g_variant_type_key(type), FALSE, error)) return FALSE;
        if (!append_dbus_type(out, g_variant_type_value(type), FALSE, error)) return FALSE;
        g_string_append_c(out, '}');
        return TRUE;
    }
    if (g_variant_type_is_tuple(type)) {
        if (g_variant_type_n_items(type) == 0) {
            g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED, "the empty tuple () has no D-Bus form");
            return FALSE;
        }
        g_string_append_c(out, '(');
        for (const GVariantType *item = g_variant_type_first(type); item; item = g_variant_type_next(item))
            if (!append_dbus_type(out, item, FALSE, error)) return FALSE;
        g_string_append_c(out, ')');
        return TRUE;
    }
    if (g_variant_type_equal(type, G_VARIANT_TYPE_HANDLE)) {
        g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED, "a handle (h) means nothing once stored");
        return FALSE;
    }
    g_string_append_len(out, g_variant_type_peek_string(type), (gssize) g_variant_type_get_string_length(type));
    return TRUE;
}

static gchar *dbus_type_string(const GVariantType *type, gboolean in_array, GError **error) {
    GString *out = g_string_new(NULL);
    if (!append_dbus_type(out, type, in_array, error)) {
        g_string_free(out, TRUE);
        return NULL;
    }
    return g_string_free(out, FALSE);
}

gchar *pbgs_dbus_type_for(const GVariantType *type, GError **error) {
    return dbus_type_string(type, FALSE, error);
}

/* Whether values of this type are their own D-Bus form: no maybe, variant (which may hold
 * one), handle, empty tuple or bare dict entry anywhere in it. */
static gboolean is_plain_dbus(const gchar *type) {
    for (const gchar *c = type; *c; c++) {
        if (*c == 'm' || *c == 'v' || *c == 'h' || *c == '*' || *c == '?' || *c == 'r') return FALSE;
        if (*c == '(' && c[1] == ')') return FALSE;
        if (*c == '{' && (c == type || c[-1] != 'a')) return FALSE;
    }
    return TRUE;
}

/* Every function below returns a full (not floating) reference; containers are built from
 * children that are then released. */
static GVariant *owned(GVariant *value) {
    return value ? g_variant_ref_sink(value) : NULL;
}

static void release_all(GVariant **children, gsize n) {
    for (gsize i = 0; i < n; i++)
        if (children[i]) g_variant_unref(children[i]);
    g_free(children);
}

static GVariant *to_dbus(GVariant *value, gboolean in_array, gboolean in_variant, GError **error);

/* The children of a container in D-Bus form, or NULL. */
static GVariant **children_to_dbus(GVariant *value, gsize *count, gboolean in_array, gboolean in_variant, GError **error) {
    gsize n = g_variant_n_children(value);
    GVariant **children = g_new0(GVariant *, n + 1);
    for (gsize i = 0; i < n; i++) {
        GVariant *child = g_variant_get_child_value(value, i);
        children[i] = to_dbus(child, in_array, in_variant, error);
        g_variant_unref(child);
        if (children[i] == NULL) {
            release_all(children, i);
            return NULL;
        }
    }
    *count = n;
    return children;
}

static GVariant *to_dbus(GVariant *value, gboolean in_array, gboolean in_variant, GError **error) {
    const GVariantType *type = g_variant_get_type(value);
    if (is_plain_dbus(g_variant_get_type_string(value)) && !(in_variant && g_variant_type_is_array(type))
        && !(g_variant_type_is_dict_entry(type) && !in_array))
        return g_variant_ref(value);
    gchar *dbus_type = dbus_type_string(type, in_array, error);
    if (dbus_type == NULL) return NULL;
    GVariant *result = NULL;
    gsize n = 0;
    GVariant **children = NULL;
    switch (g_variant_classify(value)) {
    case G_VARIANT_CLASS_MAYBE: {
        GVariant *child = g_variant_get_maybe(value);
        if (child == NULL) {
            result = owned(g_variant_new_array(G_VARIANT_TYPE(dbus_type + 1), NULL, 0));
        } else {
            GVariant *encoded = to_dbus(child, FALSE, in_variant, error);
            g_variant_unref(child);
            if (encoded != NULL) {
                GVariant *tuple = owned(g_variant_new_tuple(&encoded, 1));
                result = owned(g_variant_new_array(NULL, &tuple, 1));
                g_variant_unref(tuple);
                g_variant_unref(encoded);
            }
        }
        break;
    }
    case G_VARIANT_CLASS_ARRAY: {
        const GVariantType *element = g_variant_type_element(type);
        if (in_variant && g_variant_type_is_tuple(element) && g_variant_type_n_items(element) == 1) {
            g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                                "an array of one-element tuples inside a variant would read back as a maybe");
            break;
        }
        children = children_to_dbus(value, &n, TRUE, in_variant, error);
        if (children != NULL) result = owned(g_variant_new_array(G_VARIANT_TYPE(dbus_type + 1), children, n));
        break;
    }
    case G_VARIANT_CLASS_TUPLE:
        children = children_to_dbus(value, &n, FALSE, in_variant, error);
        if (children != NULL) result = owned(g_variant_new_tuple(children, n));
        break;
    case G_VARIANT_CLASS_DICT_ENTRY:
        children = children_to_dbus(value, &n, FALSE, in_variant, error);
        if (children != NULL) result = owned(g_variant_new_dict_entry(children[0], children[1]));
        break;
    case G_VARIANT_CLASS_VARIANT: {
        GVariant *inner = g_variant_get_variant(value);
        GVariant *encoded = to_dbus(inner, FALSE, TRUE, error);
        g_variant_unref(inner);
        if (encoded != NULL) {
            result = owned(g_variant_new_variant(encoded));
            g_variant_unref(encoded);
        }
        break;
    }
    default:
        result = g_variant_ref(value);
        break;
    }
    if (children != NULL) release_all(children, n);
    g_free(dbus_type);
    return result;
}

GVariant *pbgs_to_dbus(GVariant *value, GError **error) {
    return to_dbus(value, FALSE, FALSE, error);
}

/* The GVariant type a D-Bus type read without a schema stands for: a(T) of a one-field struct
 * is mT, everything else itself. */
static void append_schemaless_type(GString *out, const GVariantType *type) {
    if (g_variant_type_is_array(type)) {
        const GVariantType *element = g_variant_type_element(type);
        if (g_variant_type_is_tuple(element) && g_variant_type_n_items(element) == 1) {
            g_string_append_c(out, 'm');
            append_schemaless_type(out, g_variant_type_first(element));
        } else {
            g_string_append_c(out, 'a');
            append_schemaless_type(out, element);
        }
    } else if (g_variant_type_is_tuple(type) || g_variant_type_is_dict_entry(type)) {
        g_string_append_c(out, g_variant_type_is_tuple(type) ? '(' : '{');
        for (const GVariantType *item = g_variant_type_first(type); item; item = g_variant_type_next(item))
            append_schemaless_type(out, item);
        g_string_append_c(out, g_variant_type_is_tuple(type) ? ')' : '}');
    } else {
        g_string_append_len(out, g_variant_type_peek_string(type), (gssize) g_variant_type_get_string_length(type));
    }
}

static GVariant *from_dbus(GVariant *value, const GVariantType *expected);

static GVariant *from_dbus_schemaless(GVariant *value) {
    GString *type = g_string_new(NULL);
    append_schemaless_type(type, g_variant_get_type(value));
    GVariant *result = g_variant_type_string_is_valid(type->str) ? from_dbus(value, G_VARIANT_TYPE(type->str)) : NULL;
    g_string_free(type, TRUE);
    return result;
}

static GVariant *from_dbus(GVariant *value, const GVariantType *expected) {
    const gchar *expected_string = g_variant_type_peek_string(expected);
    if (g_variant_type_is_maybe(expected)) {
        /* [] or [(x)] */
        if (g_variant_classify(value) != G_VARIANT_CLASS_ARRAY) return NULL;
        const GVariantType *element = g_variant_type_element(g_variant_get_type(value));
        if (!g_variant_type_is_tuple(element) || g_variant_type_n_items(element) != 1) return NULL;
        gsize n = g_variant_n_children(value);
        if (n == 0) return owned(g_variant_new_maybe(g_variant_type_element(expected), NULL));
        if (n > 1) return NULL;
        GVariant *tuple = g_variant_get_child_value(value, 0);
        GVariant *inner = g_variant_get_child_value(tuple, 0);
        GVariant *decoded = from_dbus(inner, g_variant_type_element(expected));
        g_variant_unref(inner);
        g_variant_unref(tuple);
        if (decoded == NULL) return NULL;
        GVariant *result = owned(g_variant_new_maybe(NULL, decoded));
        g_variant_unref(decoded);
        return result;
    }
    if (g_variant_type_is_basic(expected) || is_plain_dbus(expected_string))
        return g_variant_is_of_type(value, expected) ? g_variant_ref(value) : NULL;
    if (g_variant_type_is_variant(expected)) {
        if (!g_variant_is_of_type(value, G_VARIANT_TYPE_VARIANT)) return NULL;
        GVariant *inner = g_variant_get_variant(value);
        GVariant *decoded = from_dbus_schemaless(inner);
        g_variant_unref(inner);
        if (decoded == NULL) return NULL;
        GVariant *result = owned(g_variant_new_variant(decoded));
        g_variant_unref(decoded);
        return result;
    }
    /* An array, tuple or dict entry with a maybe or a variant somewhere inside. */
    GVariantClass class = g_variant_classify(value);
    gboolean array = g_variant_type_is_array(expected);
    if ((array && class != G_VARIANT_CLASS_ARRAY) || (g_variant_type_is_tuple(expected) && class != G_VARIANT_CLASS_TUPLE)
        || (g_variant_type_is_dict_entry(expected) && class != G_VARIANT_CLASS_DICT_ENTRY))
        return NULL;
    gsize n = g_variant_n_children(value);
    if (!array && n != g_variant_type_n_items(expected)) return NULL;
    GVariant **children = g_new0(GVariant *, n + 1);
    const GVariantType *item = array ? NULL : g_variant_type_first(expected);
    gboolean ok = TRUE;
    for (gsize i = 0; i < n && ok; i++) {
        GVariant *child = g_variant_get_child_value(value, i);
        children[i] = from_dbus(child, array ? g_variant_type_element(expected) : item);
        g_variant_unref(child);
        ok = children[i] != NULL;
        if (!array) item = g_variant_type_next(item);
    }
    GVariant *result = NULL;
    if (ok) {
        if (array) result = owned(g_variant_new_array(g_variant_type_element(expected), children, n));
        else if (g_variant_type_is_tuple(expected)) result = owned(g_variant_new_tuple(children, n));
        else result = owned(g_variant_new_dict_entry(children[0], children[1]));
    }
    release_all(children, n);
    return result;
}

GVariant *pbgs_from_dbus(GVariant *value, const GVariantType *expected) {
    return from_dbus(value, expected);
}

GVariant *pbgs_zero_value(const GVariantType *type) {
    GVariant *result;
    switch (g_variant_type_peek_string(type)[0]) {
    case 'b': result = g_variant_new_boolean(FALSE); break;
    case 'y': result = g_variant_new_byte(0); break;
    case 'n': result = g_variant_new_int16(0); break;
    case 'q': result = g_variant_new_uint16(0); break;
    case 'i': result = g_variant_new_int32(0); break;
    case 'u': result = g_variant_new_uint32(0); break;
    case 'x': result = g_variant_new_int64(0); break;
    case 't': result = g_variant_new_uint64(0); break;
    case 'd': result = g_variant_new_double(0); break;
    case 's': result = g_variant_new_string(""); break;
    case 'o': result = g_variant_new_object_path("/"); break;
    case 'g': result = g_variant_new_signature(""); break;
    case 'v': result = g_variant_new_variant(g_variant_new_string("")); break;
    case 'a': result = g_variant_new_array(g_variant_type_element(type), NULL, 0); break;
    case '(': {
        gsize n = g_variant_type_n_items(type), i = 0;
        GVariant **items = g_new0(GVariant *, n + 1);
        for (const GVariantType *item = g_variant_type_first(type); item; item = g_variant_type_next(item))
            items[i++] = pbgs_zero_value(item);
        result = g_variant_new_tuple(items, n);
        for (i = 0; i < n; i++) g_variant_unref(items[i]);
        g_free(items);
        break;
    }
    default: result = g_variant_new_string(""); break;
    }
    return g_variant_ref_sink(result);
}
