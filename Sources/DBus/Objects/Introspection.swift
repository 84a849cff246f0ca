/// Renders introspection XML from interface descriptions.
public enum Introspection {
    /// The XML document for one node.
    ///
    /// - Parameter call: the `Introspect` call, for properties whose access depends on the caller.
    public static func xml(interfaces: [InterfaceDescription], children: [String], for call: MethodCall? = nil) -> String {
        var out = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
        <node>

        """
        for interface in interfaces {
            out += " <interface name=\"\(escape(interface.name))\">\n"
            for annotation in interface.annotations {
                out += "  <annotation name=\"\(escape(annotation.name))\" value=\"\(escape(annotation.value))\"/>\n"
            }
            for method in interface.methods.values.sorted(by: { $0.name < $1.name }) {
                out += "  <method name=\"\(escape(method.name))\">\n"
                for argument in method.inArguments {
                    out += "   <arg name=\"\(escape(argument.name))\" type=\"\(escape(argument.type.signature))\" direction=\"in\"/>\n"
                }
                for argument in method.outArguments {
                    out += "   <arg name=\"\(escape(argument.name))\" type=\"\(escape(argument.type.signature))\" direction=\"out\"/>\n"
                }
                out += "  </method>\n"
            }
            for signal in interface.signals {
                out += "  <signal name=\"\(escape(signal.name))\">\n"
                for argument in signal.arguments {
                    out += "   <arg name=\"\(escape(argument.name))\" type=\"\(escape(argument.type.signature))\"/>\n"
                }
                out += "  </signal>\n"
            }
            for property in interface.properties.all {
                out += "  <property name=\"\(escape(property.name))\" type=\"\(escape(property.type.signature))\" access=\"\((call.flatMap { property.accessForCaller?($0) } ?? property.access).rawValue)\""
                if property.changeSignal != .emits {
                    out += ">\n   <annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"\(property.changeSignal.rawValue)\"/>\n  </property>\n"
                } else {
                    out += "/>\n"
                }
            }
            out += " </interface>\n"
        }
        for child in children {
            out += " <node name=\"\(escape(child))\"/>\n"
        }
        out += "</node>\n"
        return out
    }

    /// XML attribute escaping.
    static func escape(_ text: String) -> String {
        var result = ""
        result.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            case "'": result += "&apos;"
            default: result.append(character)
            }
        }
        return result
    }
}
