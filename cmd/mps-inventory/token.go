package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

const tokenLong = `API tokens, kept in the inventory's database (--db, the same as the
server's). Every API call but /healthz and /readyz needs one, as
"Authorization: Bearer <token>". Roles:
  admin   everything, attaching and detaching devices included
  host    reads; registers and syncs its own host (--host) and its devices
  viewer  reads
Only a hash of each token is stored: the token is shown once, at creation.`

// tokenCommand is `mps-inventory token`: create, list and revoke tokens,
// working on the database directly (no server needed).
func tokenCommand(f *flags, stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Create, list and revoke API tokens", Long: tokenLong, Args: cobra.NoArgs}
	var role, host, name string
	create := &cobra.Command{
		Use:   "create --role admin|host|viewer [--host NAME] [--name LABEL]",
		Short: "Create a token and print it (once) on stdout",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			r, err := store.ParseRole(role)
			if err != nil {
				return fmt.Errorf("--role: %w", err)
			}
			if r == store.RoleHost && host == "" {
				return errors.New("--role host needs --host, the name of the host the token acts for")
			}
			if r != store.RoleHost && host != "" {
				return fmt.Errorf("--host is only for --role host (role is %s)", r)
			}
			return withStore(c.Context(), f, stderr, func(st *store.Store) error {
				whole, tok, err := st.CreateToken(c.Context(), store.NewToken{Name: name, Role: r, Host: host})
				if err != nil {
					return err
				}
				fmt.Fprintln(stdout, whole)
				fmt.Fprintf(stderr, "created %s token %s%s; it is not stored and will not be shown again\n", tok.Role, tok.ID, hostSuffix(tok))
				return nil
			})
		},
	}
	create.Flags().StringVar(&role, "role", "", "admin, host or viewer (required)")
	create.Flags().StringVar(&host, "host", "", "for --role host: the name of the host the token acts for")
	create.Flags().StringVar(&name, "name", "", "a label for the token, shown by token list")

	list := &cobra.Command{
		Use:   "list",
		Short: "List the tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withStore(c.Context(), f, stderr, func(st *store.Store) error {
				toks, err := st.ListTokens(c.Context())
				if err != nil {
					return err
				}
				return printTokens(stdout, toks)
			})
		},
	}

	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a token by its id (see token list); running inventories refuse it within a second",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return withStore(c.Context(), f, stderr, func(st *store.Store) error {
				if err := st.RevokeToken(c.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(stderr, "revoked token %s\n", args[0])
				return nil
			})
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

// withStore opens the database for one token command.
func withStore(ctx context.Context, f *flags, stderr io.Writer, fn func(st *store.Store) error) error {
	st, _, err := openStore(ctx, *f, stderr)
	if err != nil {
		return err
	}
	return errors.Join(fn(st), st.Close())
}

func hostSuffix(t store.Token) string {
	if t.Host == "" {
		return ""
	}
	return " for host " + t.Host
}

// printTokens writes the token table: id, name, role, host, created and
// last used (to the minute), oldest first.
func printTokens(w io.Writer, toks []store.Token) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tHOST\tCREATED\tLAST USED")
	for _, t := range toks {
		used := "never"
		if !t.LastUsedAt.IsZero() {
			used = t.LastUsedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, dash(t.Name), t.Role, dash(t.Host), t.CreatedAt.Format(time.RFC3339), used)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the token list: %w", err)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
