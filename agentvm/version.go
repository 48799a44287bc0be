package agentvm

// Version is the agent's version, returned by Info and checked by the control plane (which refuses
// agents older than activities.MinAgentVersion). Bump it on every change of the agent's behaviour
// (protocol, tools, journal format), and raise MinAgentVersion when the control plane starts
// relying on a change.
const Version = "0.17.2"
