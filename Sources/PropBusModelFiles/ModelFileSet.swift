import PropBus

/// The daemon's model files and what each one declared: loads them at startup and again on a
/// reload (SIGHUP, `Manager.Reload`), applying the difference (docs/model-files.md, "Lifecycle").
///
/// - New keys appear; changed definitions apply (a stored value they do not admit is hidden,
///   never deleted).
/// - A key whose file no longer declares it (or whose file is gone) leaves the bus; its stored
///   value stays, unclaimed, until it is declared again or pruned. A ``shared`` (fleet) key stays.
/// - A file that cannot be read or applied is skipped as a whole, and the keys it declared
///   before stay as they were; the other files load. With `strict` the first bad file throws.
/// - A load is one round, all or nothing: when the store cannot commit it, the owner rolls the
///   round back and calls ``rollbackLoad()``, and nothing of it stays.
///
/// Confined, like the model, to the daemon's queue; call between dispatch rounds.
public final class ModelFileSet {
    /// A file that was not loaded, and why (the message names file:line:column).
    public struct Skipped: Sendable, Equatable {
        public var path: String
        public var reason: String

        public init(path: String, reason: String) {
            self.path = path
            self.reason = reason
        }
    }

    /// What one load did.
    public struct Report {
        /// The model changes, to publish.
        public var changes: [PropertyChange] = []
        /// The files loaded.
        public var loaded: [String] = []
        /// Keys that left the bus (their stored values kept).
        public var retired: [Key] = []
        /// Executions of commands whose file no longer declares them: the caller cancels them.
        public var ended: [CommandTable.Execution] = []
    }

    /// The files skipped by the last load.
    public private(set) var skipped: [Skipped] = []
    /// The daemon-side bindings each file made, unmade when the file is applied again.
    private var bindingIDs: [String: [UInt64]] = [:]
    /// The commands each file declared at its last load; one it drops is deleted.
    private var commandKeys: [String: Set<Key>] = [:]
    /// This set's own bookkeeping before the last load, for ``rollbackLoad()``.
    private var beforeLoad: (skipped: [Skipped], bindingIDs: [String: [UInt64]], commandKeys: [String: Set<Key>])?

    /// Definitions the files may not change (the fleet's, with `--fleet`); see ``ModelFile/apply(to:commands:shared:)``.
    public var shared: SharedDefinitions?
    /// The largest file read, in bytes (``ModelFile/defaultMaximumSize``); a larger one is skipped unread.
    public var maximumFileSize = ModelFile.defaultMaximumSize

    public init() {}

    /// A model file read and checked, or why it could not be.
    public typealias ReadFile = (path: String, file: Result<ModelFile, PropBusError>)

    /// Reads and checks each of `paths` (at most `maximumSize` bytes each). Touches nothing but
    /// the files, so a reload runs it off the daemon's queue: reading and parsing take time.
    public static func read(_ paths: [String], maximumSize: Int) -> [ReadFile] {
        paths.map { path in
            do throws(PropBusError) { return (path, .success(try ModelFile(contentsOf: path, maximumSize: maximumSize, keepingProblems: true))) } catch {
                return (path, .failure(error))
            }
        }
    }

    /// Reads every file of `paths` and applies them in order: ``load(files:into:commands:strict:)``.
    public func load(_ paths: [String], into model: PropertyModel, commands: CommandTable,
                     strict: Bool) throws(PropBusError) -> Report {
        try load(files: Self.read(paths, maximumSize: maximumFileSize), into: model, commands: commands, strict: strict)
    }

    /// Applies the files (``read(_:maximumSize:)``) in order, then retires the keys no file
    /// declares any more, all in the model's open round (the caller commits it, or rolls it
    /// back and calls ``rollbackLoad()``). Throws only with `strict`, for the first bad file.
    public func load(files: [ReadFile], into model: PropertyModel, commands: CommandTable,
                     strict: Bool) throws(PropBusError) -> Report {
        let paths = files.map(\.path)
        var report = Report()
        var skipped: [Skipped] = []
        var declared: Set<Key> = []
        let previousCommands = commandKeys
        beforeLoad = (self.skipped, bindingIDs, commandKeys)
        let atStartup = model.origin == .startup
        for (path, read) in files {
            let file: ModelFile
            switch read {
            case .success(let read) where !read.problems.isEmpty:
                // Skipped as a whole, with the type changes only the model can see: one reload
                // names every problem of the file.
                let error = PropBusError(.invalidArgs, (read.problems + read.typeChanges(in: model)).joined(separator: "\n"))
                if strict { throw error }
                skipped.append(Skipped(path: path, reason: error.message))
                continue
            case .success(let read):
                file = read
            case .failure(let error):
                if strict { throw error }
                skipped.append(Skipped(path: path, reason: error.message))
                continue
            }
            // A savepoint per file inside the load's one round: a file is skipped as a whole,
            // and a commit that fails takes back every file (committing the model's round per
            // file left the files applied when the store then refused them).
            let commandsSavepoint = commands.savepoint()
            // At start-up each file's declarations are its own change in history; a reload's
            // stay the reload's.
            if atStartup { model.origin = .modelFile(path: path) }
            let modelSavepoint = model.savepoint()
            do {
                var changes: [PropertyChange] = []
                // Declared bindings are made again with the file: first unmake the old ones.
                for id in bindingIDs[path] ?? [] where model.bindings[id] != nil {
                    changes += try model.unbind(id)
                }
                changes += try file.apply(to: model, commands: commands, shared: shared)
                model.release(modelSavepoint)
                bindingIDs[path] = changes.compactMap { if case .bound(let binding) = $0 { binding.id } else { nil } }
                // Grown once, without an array of the keys in between.
                declared.reserveCapacity(declared.count + file.properties.count)
                for property in file.properties { declared.insert(property.key) }
                commandKeys[path] = Set(file.commands.map(\.key))
                report.changes += changes
                report.loaded.append(path)
            } catch {
                // The whole file, or nothing of it.
                model.rollback(to: modelSavepoint)
                commands.restore(commandsSavepoint)
                if strict { throw error }
                skipped.append(Skipped(path: path, reason: error.message))
            }
        }
        // What follows (keys and bindings retired) is no one file's.
        if atStartup { model.origin = .startup }
        // A file that is gone takes its bindings with it.
        for (path, ids) in bindingIDs where !paths.contains(path) {
            for id in ids where model.bindings[id] != nil { report.changes += (try? model.unbind(id)) ?? [] }
            bindingIDs[path] = nil
        }
        // Keys from a file that no longer declares them leave the bus; a skipped file's stay.
        let kept = Set(skipped.map(\.path))
        // Commands likewise, except that a command has no value to keep: it is deleted.
        for path in commandKeys.keys where !paths.contains(path) { commandKeys[path] = nil }
        let current = commandKeys.values.reduce(into: Set<Key>()) { $0.formUnion($1) }
        let previous = previousCommands.values.reduce(into: Set<Key>()) { $0.formUnion($1) }
        for key in previous.subtracting(current).sorted() where commands.definition(of: key) != nil {
            if let (ended, changes) = try? commands.delete(key: key.text) {
                report.ended += ended
                report.changes += changes
            }
        }
        // Only the keys to retire are collected and sorted: a copy of every entry, sorted, was
        // a tenth of a start-up with 100k stored properties and no model file at all.
        // A shared key is not the file's to take away: it stays, the fleet's, on every host.
        let retiring = model.keys { [shared] definition in
            guard let source = definition.source else { return false }
            return !kept.contains(source) && !declared.contains(definition.key) && shared?.contains(definition) != true
        }
        for key in retiring {
            report.changes += model.retire(key)
            report.retired.append(key)
        }
        // The retirements stay in the round: a store that cannot commit them rolls them back.
        self.skipped = skipped
        return report
    }

    /// Takes back this set's bookkeeping of the last load, whose round the store refused and
    /// the owner rolled back: the files' bindings and commands are again those of the load before.
    public func rollbackLoad() {
        guard let beforeLoad else { return }
        (skipped, bindingIDs, commandKeys) = beforeLoad
        self.beforeLoad = nil
    }
}
