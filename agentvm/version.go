package agentvm

// Version is the agent's version, returned by Info and checked by the control plane. Bump it on
// every change of the agent's behaviour (protocol, tools, journal format).
const Version = "0.7.0"
