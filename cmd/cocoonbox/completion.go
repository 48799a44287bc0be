package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// Completion scripts: the shell asks the program itself (urfave/cli's --generate-bash-completion)
// for the words that may follow.
const bashCompletion = `# bash completion for cocoonbox: source <(cocoonbox completion bash)
_cocoonbox_complete() {
  local cur="${COMP_WORDS[COMP_CWORD]}" words=("${COMP_WORDS[@]:0:COMP_CWORD}") opts
  if [[ "$cur" == -* ]]; then
    opts=$("${words[@]}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${words[@]}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}
complete -o bashdefault -o default -F _cocoonbox_complete cocoonbox
`

const zshCompletion = `#compdef cocoonbox
# zsh completion for cocoonbox: source <(cocoonbox completion zsh)
_cocoonbox() {
  local -a opts
  local cur=${words[-1]}
  if [[ "$cur" == -* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _cocoonbox cocoonbox
`

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: source <(cocoonbox completion bash)",
		ArgsUsage: "bash|zsh",
		Action: func(c *cli.Context) error {
			args, err := positional(c, "bash|zsh", 1, 1)
			if err != nil {
				return err
			}
			script := map[string]string{"bash": bashCompletion, "zsh": zshCompletion}[args[0]]
			if script == "" {
				return usageError("completion: want bash or zsh, got %q", args[0])
			}
			_, err = fmt.Fprint(c.App.Writer, script)
			return err
		},
	}
}
