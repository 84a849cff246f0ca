import Foundation
import XCTest

#if canImport(FoundationXML)
import FoundationXML
#endif

@testable import DBus

final class IntrospectionTests: XCTestCase {
    // MARK: Helpers

    /// One parsed element: its name, attributes and the names of its ancestors.
    private struct Element: Equatable {
        var name: String
        var attributes: [String: String]
        var ancestors: [String]
    }

    /// Collects every element of a document, in document order.
    private final class Collector: NSObject, XMLParserDelegate {
        var elements: [Element] = []
        var stack: [String] = []
        var error: Error?

        func parser(_ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
                    qualifiedName: String?, attributes: [String: String] = [:]) {
            elements.append(Element(name: elementName, attributes: attributes, ancestors: stack))
            stack.append(elementName)
        }

        func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
            stack.removeLast()
        }

        func parser(_ parser: XMLParser, parseErrorOccurred parseError: Error) { error = parseError }
    }

    /// Parses `xml`, failing the test when it is not well formed.
    private func parse(_ xml: String, file: StaticString = #filePath, line: UInt = #line) -> [Element] {
        let parser = XMLParser(data: Data(xml.utf8))
        let collector = Collector()
        parser.delegate = collector
        // The DOCTYPE names an external DTD; never fetch it.
        parser.shouldResolveExternalEntities = false
        let ok = parser.parse()
        XCTAssertTrue(ok, "not well formed: \(String(describing: collector.error ?? parser.parserError))\n\(xml)", file: file, line: line)
        XCTAssertTrue(collector.stack.isEmpty, "unclosed elements \(collector.stack)", file: file, line: line)
        return collector.elements
    }

    private func noReply(_: MethodCall) -> MethodResult { .reply([]) }

    private func property(_ name: String, _ type: DBusType, writable: Bool = false,
                          changeSignal: ChangeSignal = .emits) -> PropertyDescription {
        PropertyDescription(name, type: type, access: writable ? .readwrite : .read, changeSignal: changeSignal,
                            get: { .boolean(true) }, set: writable ? { _, _ in } : nil)
    }

    private var sample: InterfaceDescription {
        InterfaceDescription("org.propbus.Test1",
            methods: [
                MethodDescription("Set", in: [("key", .string), ("value", .variant)], handler: noReply),
                MethodDescription("Get", in: [("key", .string)], out: [("value", .variant)], handler: noReply),
                MethodDescription("List", in: [("prefix", .string)], out: [("keys", .array(.string)), ("metadata", .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)))], handler: noReply),
                MethodDescription("Ping", handler: noReply),
            ],
            properties: .fixed([
                property("Version", .string),
                property("Count", .uint32, writable: true),
                property("Fixed", .structure([.string, .int32]), changeSignal: .const),
                property("Lazy", .array(.byte), writable: true, changeSignal: .invalidates),
                property("Quiet", .dictionary(key: .string, value: .variant), changeSignal: .none),
            ]),
            signals: [
                SignalDescription("Changed", [("key", .string), ("value", .variant)]),
                SignalDescription("Reloaded"),
            ],
            annotations: [(name: "org.freedesktop.DBus.Deprecated", value: "false")])
    }

    // MARK: Structure

    func testDocumentIsWellFormedWithTheStandardDoctype() {
        let xml = Introspection.xml(interfaces: [sample], children: ["a", "b"])
        XCTAssertTrue(xml.hasPrefix("<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<node>\n"), xml)
        XCTAssertTrue(xml.hasSuffix("</node>\n"), xml)
        let elements = parse(xml)
        XCTAssertEqual(elements.first?.name, "node")
        XCTAssertEqual(elements.first?.attributes, [:])
        XCTAssertEqual(elements.filter { $0.name == "interface" }.map { $0.attributes["name"] }, ["org.propbus.Test1"])
    }

    func testMethodsAreSortedWithTheirArgumentsInOrder() {
        let elements = parse(Introspection.xml(interfaces: [sample], children: []))
        XCTAssertEqual(elements.filter { $0.name == "method" }.map { $0.attributes["name"] }, ["Get", "List", "Ping", "Set"])
        let methodArguments = elements.filter { $0.name == "arg" && $0.ancestors.last == "method" }.map(\.attributes)
        XCTAssertEqual(methodArguments, [
            ["name": "key", "type": "s", "direction": "in"], ["name": "value", "type": "v", "direction": "out"],
            ["name": "prefix", "type": "s", "direction": "in"], ["name": "keys", "type": "as", "direction": "out"],
            ["name": "metadata", "type": "a{sa{sv}}", "direction": "out"],
            ["name": "key", "type": "s", "direction": "in"], ["name": "value", "type": "v", "direction": "in"],
        ])
        // A method without arguments is still a closed element.
        XCTAssertTrue(Introspection.xml(interfaces: [sample], children: []).contains("  <method name=\"Ping\">\n  </method>\n"))
    }

    func testSignalArgumentsHaveNoDirection() {
        let elements = parse(Introspection.xml(interfaces: [sample], children: []))
        XCTAssertEqual(elements.filter { $0.name == "signal" }.map { $0.attributes["name"] }, ["Changed", "Reloaded"])
        let signalArguments = elements.filter { $0.name == "arg" && $0.ancestors.last == "signal" }.map(\.attributes)
        XCTAssertEqual(signalArguments, [["name": "key", "type": "s"], ["name": "value", "type": "v"]])
    }

    func testPropertiesCarryTypeAndAccess() {
        let elements = parse(Introspection.xml(interfaces: [sample], children: []))
        let properties = elements.filter { $0.name == "property" }.map(\.attributes)
        XCTAssertEqual(properties, [
            ["name": "Version", "type": "s", "access": "read"],
            ["name": "Count", "type": "u", "access": "readwrite"],
            ["name": "Fixed", "type": "(si)", "access": "read"],
            ["name": "Lazy", "type": "ay", "access": "readwrite"],
            ["name": "Quiet", "type": "a{sv}", "access": "read"],
        ])
    }

    func testAPropertyWithoutSetterIsReadOnlyWhateverItsDeclaredAccess() {
        let readOnly = PropertyDescription("P", type: .int32, access: .readwrite, get: { .int32(1) })
        let xml = Introspection.xml(interfaces: [InterfaceDescription("org.propbus.T", properties: .fixed([readOnly]))], children: [])
        XCTAssertEqual(parse(xml).first { $0.name == "property" }?.attributes["access"], "read")
    }

    func testEmitsChangedSignalIsAnnotatedOnlyForNonDefaultModes() {
        let xml = Introspection.xml(interfaces: [sample], children: [])
        let elements = parse(xml)
        let propertyAnnotations = elements.filter { $0.name == "annotation" && $0.ancestors.last == "property" }.map(\.attributes)
        XCTAssertEqual(propertyAnnotations, [
            ["name": "org.freedesktop.DBus.Property.EmitsChangedSignal", "value": "const"],
            ["name": "org.freedesktop.DBus.Property.EmitsChangedSignal", "value": "invalidates"],
            ["name": "org.freedesktop.DBus.Property.EmitsChangedSignal", "value": "false"],
        ])
        XCTAssertTrue(xml.contains("  <property name=\"Version\" type=\"s\" access=\"read\"/>\n"), xml)
        XCTAssertTrue(xml.contains("""
          <property name="Fixed" type="(si)" access="read">
           <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
          </property>

        """), xml)
    }

    func testInterfaceAnnotationsComeFirstInTheInterface() {
        let elements = parse(Introspection.xml(interfaces: [sample], children: []))
        let interfaceChildren = elements.filter { $0.ancestors == ["node", "interface"] }
        XCTAssertEqual(interfaceChildren.first?.name, "annotation")
        XCTAssertEqual(interfaceChildren.first?.attributes, ["name": "org.freedesktop.DBus.Deprecated", "value": "false"])
    }

    func testDynamicPropertyTablesAreListedInTheirOwnOrder() {
        let names = ["zeta", "alpha", "missing", "mid"]
        let table = PropertyTable.dynamic(names: { names }, lookup: { name in
            name == "missing" ? nil : PropertyDescription(name, type: .string, get: { .string(name) })
        })
        let xml = Introspection.xml(interfaces: [InterfaceDescription("org.propbus.PropBus1.Values", properties: table)], children: [])
        XCTAssertEqual(parse(xml).filter { $0.name == "property" }.map { $0.attributes["name"] }, ["zeta", "alpha", "mid"])
    }

    func testChildNodesFollowTheInterfaces() {
        let xml = Introspection.xml(interfaces: [sample], children: ["ui", "settings", "_9"])
        let elements = parse(xml)
        let nodes = elements.filter { $0.name == "node" && $0.ancestors == ["node"] }
        XCTAssertEqual(nodes.map { $0.attributes }, [["name": "ui"], ["name": "settings"], ["name": "_9"]])
        XCTAssertTrue(xml.hasSuffix(" </interface>\n <node name=\"ui\"/>\n <node name=\"settings\"/>\n <node name=\"_9\"/>\n</node>\n"), xml)
    }

    func testAnEmptyNodeIsStillADocument() {
        let xml = Introspection.xml(interfaces: [], children: [])
        XCTAssertEqual(parse(xml).map(\.name), ["node"])
        XCTAssertTrue(xml.hasSuffix("<node>\n</node>\n"), xml)
    }

    // MARK: Escaping

    func testAttributeValuesAreEscaped() {
        let awkward = #"a<b>&"c"'d'"#
        let interface = InterfaceDescription("org.propbus.Escape",
            methods: [MethodDescription("M", in: [(awkward, .string)], handler: noReply)],
            properties: .fixed([PropertyDescription(awkward, type: .string, get: { .string("") })]),
            signals: [SignalDescription("S", [(awkward, .string)])],
            annotations: [(name: "org.propbus.Note", value: awkward + " <tag attr=\"x\"/> &amp;")])
        let xml = Introspection.xml(interfaces: [interface], children: [awkward])
        XCTAssertTrue(xml.contains("a&lt;b&gt;&amp;&quot;c&quot;&apos;d&apos;"), xml)
        XCTAssertFalse(xml.contains(awkward), xml)
        let elements = parse(xml)
        // Whatever went in comes back out of a real parser unchanged.
        XCTAssertEqual(elements.first { $0.name == "annotation" }?.attributes["value"], awkward + " <tag attr=\"x\"/> &amp;")
        XCTAssertEqual(elements.filter { $0.name == "arg" }.compactMap { $0.attributes["name"] }, [awkward, awkward])
        XCTAssertEqual(elements.first { $0.name == "property" }?.attributes["name"], awkward)
        XCTAssertEqual(elements.last { $0.name == "node" }?.attributes["name"], awkward)
    }

    func testNonASCIIPassesThroughUnescaped() {
        XCTAssertEqual(Introspection.escape("héllo ✓ 𝄞"), "héllo ✓ 𝄞")
        XCTAssertEqual(Introspection.escape(""), "")
        XCTAssertEqual(Introspection.escape("&&"), "&amp;&amp;")
    }
}
