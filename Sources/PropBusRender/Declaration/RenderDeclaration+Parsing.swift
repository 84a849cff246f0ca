import DBusValues
import Glibc
import PropBus
import SystemKit

/// Who may declare renders: a render writes files and runs programs with the daemon's rights
/// (root's, for a daemon that renders into /etc), so its model file and template must be
/// root's, or the daemon's own user's (a user's daemon renders as that user), and writable by
/// no one else.
public enum FileTrust {
    /// Why a file owned and moded as `ownership` may not declare renders; `nil` when it may.
    public static func refusal(_ ownership: FileSystem.Ownership, of path: String, what: String,
                               daemonUserID: UInt32 = geteuid()) -> String? {
        if ownership.userID != 0, ownership.userID != daemonUserID {
            return "\(what) \(path) is owned by uid \(ownership.userID): renders write files and run programs with propbusd's rights, so only a file owned by root\(daemonUserID == 0 ? "" : " or uid \(daemonUserID) (propbusd's user)") may declare them"
        }
        if ownership.mode & 0o022 != 0 {
            return "\(what) \(path) has mode \(String(ownership.mode, radix: 8).leftPadded(to: 4)): renders write files and run programs with propbusd's rights, so only a file no group or other user may write may declare them (chmod go-w)"
        }
        return nil
    }
}

extension RenderDeclaration {
    /// The largest template file read, in bytes.
    public static let maximumTemplateFileSize = Template.maximumLength

    /// Reads and checks the declaration `name` of the model file `modelFile` (its `renders`
    /// member). A template file is read now (relative to the model file) and must be trusted
    /// like the model file (``FileTrust``). Throws the first problem, without a location.
    public init(name: String, json: JSONValue, modelFile: String) throws(PropBusError) {
        func fail(_ problem: String) -> PropBusError { PropBusError(.invalidArgs, problem) }
        guard Self.isValidName(name) else {
            throw fail("a render's name must match [A-Za-z_][A-Za-z0-9_]* (at most 64 bytes): its state keys are render.NAME.State, .Message and .Revision")
        }
        guard let members = json.objectMembers else { throw fail("a render must be an object with \"template\" (or \"template_text\") and \"destination\"") }
        let directory = FileSystem.directory(of: FileSystem.absolute(modelFile))
        var template: (text: String, path: String?, isPrivate: Bool)?
        var destination: String?
        var owner: AccountName?, group: AccountName?
        var mode: UInt32 = 0o644
        var check: [String] = [], reload: [String] = []
        var wait = RenderWait.none
        var requirements: [RenderRequirement] = []
        var escaping = Escaping.text
        var timeout = Self.defaultTimeout
        var description: String?
        for member in members {
            let field = member.key, item = member.value
            switch field {
            case "template", "template_text":
                guard template == nil else { throw fail("give \"template\" (a file) or \"template_text\" (the text), not both") }
                guard let text = item.stringValue else { throw fail("\"\(field)\" must be a string") }
                if field == "template_text" {
                    template = (text, nil, false)
                } else {
                    let path = text.hasPrefix("/") ? text : FileSystem.absolute(directory + "/" + text)
                    template = try Self.readTemplate(path)
                }
            case "destination":
                guard let path = item.stringValue, path.hasPrefix("/"), !path.hasSuffix("/"), FileSystem.absolute(path) == path else {
                    throw fail("\"destination\" must be an absolute path to a file, without . or .. or a trailing /")
                }
                destination = path
            case "owner", "group":
                guard let text = item.stringValue ?? item.int64Value.map({ String($0) }), let account = AccountName(text) else {
                    throw fail("\"\(field)\" must be a \(field == "owner" ? "user" : "group") name or a number")
                }
                if field == "owner" { owner = account } else { group = account }
            case "mode":
                guard let text = item.stringValue, !text.isEmpty, text.count <= 4, let bits = UInt32(text, radix: 8), bits <= 0o777 else {
                    throw fail("\"mode\" must be permission bits as a string of octal digits, such as \"0640\" (no setuid, setgid or sticky bit)")
                }
                mode = bits
            case "check", "reload":
                guard let words = item.arrayValue?.compactMap(\.stringValue), !words.isEmpty, words.count == item.arrayValue?.count else {
                    throw fail("\"\(field)\" must be a non-empty array of strings (an argv, run without a shell; {{file}} is the \(field == "check" ? "staged" : "installed") file's path)")
                }
                let argv = Self.resolvingProgram(words, beside: directory)
                if field == "check" { check = argv } else { reload = argv }
            case "wait":
                wait = try Self.wait(item)
            case "require":
                guard let items = item.arrayValue, items.allSatisfy({ $0.stringValue != nil }) else {
                    throw fail("\"require\" must be an array of keys and GROUP.* patterns")
                }
                for text in items.compactMap(\.stringValue) { requirements.append(try Self.requirement(text)) }
            case "escape":
                guard let text = item.stringValue, let mode = Escaping(rawValue: text) else {
                    throw fail("\"escape\" must be one of \(Escaping.names)")
                }
                escaping = mode
            case "timeout":
                guard let seconds = item.doubleValue, seconds > 0, seconds <= 3600 else {
                    throw fail("\"timeout\" must be a number of seconds above 0, at most 3600")
                }
                timeout = seconds
            case "description":
                guard let text = item.stringValue else { throw fail("\"description\" must be a string") }
                description = text
            default:
                throw fail("unknown field \"\(field)\"; expected \(Self.fieldNames.joined(separator: ", "))")
            }
        }
        guard let template else { throw fail("a render needs \"template\" (a file beside the model file, or an absolute path) or \"template_text\"") }
        guard let destination else { throw fail("a render needs \"destination\", the absolute path of the file it writes") }
        let parsed: Template
        do { parsed = try Template(template.text) } catch {
            throw fail("template \(template.path ?? "text"):\(error.location): \(error.problem)")
        }
        self.init(name: name, source: modelFile, template: parsed, templatePath: template.path, templateIsPrivate: template.isPrivate,
                  destination: destination, owner: owner, group: group, mode: mode, check: check, reload: reload, wait: wait,
                  requirements: requirements, escaping: escaping, timeout: timeout, description: description)
    }

    /// A template file: regular, UTF-8, trusted like a model file.
    private static func readTemplate(_ path: String) throws(PropBusError) -> (String, String?, Bool) {
        let read: (contents: [UInt8], ownership: FileSystem.Ownership)
        do { read = try FileSystem.regularFile(at: path, maximumSize: maximumTemplateFileSize) } catch {
            throw PropBusError(.invalidArgs, "cannot read the template \(path): \(error)")
        }
        if let refusal = FileTrust.refusal(read.ownership, of: path, what: "the template") {
            throw PropBusError(.invalidArgs, refusal)
        }
        guard let text = String(validating: read.contents, as: UTF8.self) else {
            throw PropBusError(.invalidArgs, "the template \(path) is not UTF-8 text")
        }
        return (text, path, read.ownership.mode & 0o004 == 0)
    }

    /// An argv whose program written `./name` or `../name` is the file beside the model file.
    private static func resolvingProgram(_ words: [String], beside directory: String) -> [String] {
        var words = words
        if words[0].hasPrefix("./") || words[0].hasPrefix("../") { words[0] = FileSystem.absolute(directory + "/" + words[0]) }
        return words
    }

    private static func wait(_ json: JSONValue) throws(PropBusError) -> RenderWait {
        func seconds(_ value: JSONValue?) -> UInt64? {
            guard let value = value?.doubleValue, value >= 0, value <= 3600 else { return nil }
            return UInt64(value * 1_000_000_000)
        }
        if let minimum = seconds(json) {
            // consul-template's rule: a single wait lets the keys settle for at most four times as long.
            return RenderWait(minimum: minimum, maximum: minimum * 4)
        }
        guard let members = json.objectMembers, members.allSatisfy({ $0.key == "min" || $0.key == "max" }),
              let minimum = seconds(json["min"] ?? .integer(0)), let maximum = seconds(json["max"] ?? json["min"] ?? .integer(0)),
              maximum >= minimum else {
            throw PropBusError(.invalidArgs, "\"wait\" must be seconds (0 to 3600) or {\"min\": SECONDS, \"max\": SECONDS} with max at least min")
        }
        return RenderWait(minimum: minimum, maximum: maximum)
    }

    private static func requirement(_ text: String) throws(PropBusError) -> RenderRequirement {
        if text.hasSuffix(".*") {
            let group = String(text.dropLast(2))
            guard (try? Key(group + ".x")) != nil else { throw PropBusError(.invalidArgs, "\"require\": '\(text)' is not GROUP.* with a valid group") }
            return .group(group)
        }
        do { _ = try Key(text) } catch { throw PropBusError(.invalidArgs, "\"require\": \(error.message)") }
        return .key(text)
    }
}
