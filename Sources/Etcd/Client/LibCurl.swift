import CCurl
import Glibc

/// libcurl, opened with `dlopen` when the first ``EtcdClient`` is made. A program that never
/// makes one (propbusd without `--fleet`) never maps libcurl and the two dozen libraries it
/// needs (OpenSSL, Kerberos, LDAP, libssh2…): about 6 MiB of resident pages in an idle daemon.
struct LibCurl: @unchecked Sendable {
    // Safety: immutable C function pointers, set once under the lazy `let`'s lock.
    let easyInit: pb_curl_easy_init_fn
    let easyCleanup: pb_curl_easy_cleanup_fn
    let easyPerform: pb_curl_easy_perform_fn
    let easyStrerror: pb_curl_easy_strerror_fn
    let slistAppend: pb_curl_slist_append_fn
    let slistFreeAll: pb_curl_slist_free_all_fn
    let multiInit: pb_curl_multi_init_fn
    let multiCleanup: pb_curl_multi_cleanup_fn
    let multiAddHandle: pb_curl_multi_handle_fn
    let multiRemoveHandle: pb_curl_multi_handle_fn
    let multiPerform: pb_curl_multi_perform_fn
    let multiPoll: pb_curl_multi_poll_fn
    let multiWakeup: pb_curl_multi_wakeup_fn
    let multiInfoRead: pb_curl_multi_info_read_fn
    /// The variadic ones, called through the shim's wrappers (`pb_curl_setopt_long(setopt, …)`).
    let setopt: UnsafeMutableRawPointer
    let getinfo: UnsafeMutableRawPointer
    /// `curl_version_info()->features` (`CURL_VERSION_*` bits).
    let features: Int32

    /// The library, or why it could not be loaded; `curl_global_init` (not thread-safe) runs
    /// once here, under the lazy initialisation's lock, before any handle exists.
    static let loaded: Result<LibCurl, EtcdError> = load()

    /// Loads the library if needed; throws when it cannot be (``EtcdClient``'s initialiser).
    static func require() throws(EtcdError) { _ = try loaded.get() }

    /// The library; only after ``require()`` succeeded (every handle comes from a client).
    static var api: LibCurl {
        switch loaded {
        case .success(let api): api
        case .failure(let error): fatalError("libcurl used before EtcdClient loaded it: \(error.message)")
        }
    }

    private static func load() -> Result<LibCurl, EtcdError> {
        // The soname of Debian's libcurl4 (OpenSSL); the unversioned name with the -dev package.
        guard let library = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL) ?? dlopen("libcurl.so", RTLD_NOW | RTLD_LOCAL) else {
            let reason = dlerror().map { String(cString: $0) } ?? "not found"
            return .failure(EtcdError(.invalidRequest, "cannot load libcurl (libcurl.so.4, Debian package libcurl4): \(reason)"))
        }
        func symbol<T>(_ name: String, as type: T.Type) throws(EtcdError) -> T {
            guard let pointer = dlsym(library, name) else {
                throw EtcdError(.invalidRequest, "libcurl has no \(name): it is older than 7.68 (curl_multi_poll, curl_multi_wakeup)")
            }
            return unsafeBitCast(pointer, to: type)
        }
        do throws(EtcdError) {
            let api = LibCurl(
                easyInit: try symbol("curl_easy_init", as: pb_curl_easy_init_fn.self),
                easyCleanup: try symbol("curl_easy_cleanup", as: pb_curl_easy_cleanup_fn.self),
                easyPerform: try symbol("curl_easy_perform", as: pb_curl_easy_perform_fn.self),
                easyStrerror: try symbol("curl_easy_strerror", as: pb_curl_easy_strerror_fn.self),
                slistAppend: try symbol("curl_slist_append", as: pb_curl_slist_append_fn.self),
                slistFreeAll: try symbol("curl_slist_free_all", as: pb_curl_slist_free_all_fn.self),
                multiInit: try symbol("curl_multi_init", as: pb_curl_multi_init_fn.self),
                multiCleanup: try symbol("curl_multi_cleanup", as: pb_curl_multi_cleanup_fn.self),
                multiAddHandle: try symbol("curl_multi_add_handle", as: pb_curl_multi_handle_fn.self),
                multiRemoveHandle: try symbol("curl_multi_remove_handle", as: pb_curl_multi_handle_fn.self),
                multiPerform: try symbol("curl_multi_perform", as: pb_curl_multi_perform_fn.self),
                multiPoll: try symbol("curl_multi_poll", as: pb_curl_multi_poll_fn.self),
                multiWakeup: try symbol("curl_multi_wakeup", as: pb_curl_multi_wakeup_fn.self),
                multiInfoRead: try symbol("curl_multi_info_read", as: pb_curl_multi_info_read_fn.self),
                setopt: try symbol("curl_easy_setopt", as: UnsafeMutableRawPointer.self),
                getinfo: try symbol("curl_easy_getinfo", as: UnsafeMutableRawPointer.self),
                features: try symbol("curl_version_info", as: pb_curl_version_info_fn.self)(CURLVERSION_FIRST)?.pointee.features ?? 0)
            let initialize = try symbol("curl_global_init", as: pb_curl_global_init_fn.self)
            guard initialize(Int(CURL_GLOBAL_ALL)) == CURLE_OK else {
                return .failure(EtcdError(.invalidRequest, "libcurl could not initialise (curl_global_init)"))
            }
            return .success(api)
        } catch {
            return .failure(error)
        }
    }
}
