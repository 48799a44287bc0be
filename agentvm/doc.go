// Package agentvm is the agent that lives in every box (cocoonbox-agent): it runs the model's tool
// loop and exposes shell, files, browser and desktop tools to the control plane and to local
// coding agents over MCP. It imports only its own protocol and tool libraries so that it builds
// small and tests anywhere.
package agentvm
