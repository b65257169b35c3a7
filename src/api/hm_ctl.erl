%% @doc `hmctl', the command-line tool (an escript built by `make cli' into `_build/hmctl'),
%% in the style of `riak-admin' and `rabbitmqctl': it connects to a running node as a hidden
%% node and shows what {@link hm_status:cluster_info/2} says from there.
%% ```
%% hmctl -sname a@host -setcookie secret status
%% hmctl -sname a status
%% hmctl -name a@host.example.com -setcookie secret wait-converged --timeout 60
%% '''
%% Commands: `status' (converged or not, members, tables, one line each), `members' (each
%% member: reachable or not, links, partitions seen, Mnesia re-joins, the last heal),
%% `tables' (each EC table and each copy: status, rows, lag, buffered and unstable
%% operations, digest), `wait-converged --timeout S' (wait until every copy has converged,
%% at most S seconds, default 60). Options: `-sname' or `-name' (the node, required; a
%% name without `@host' is on this host, as `erl -sname a' takes it),
%% `-setcookie' (default: `~/.erlang.cookie'), `--timeout S', `--json' (print the
%% `cluster_info' map as JSON, {@link hm_json}), `--fragments' (each fragment of a
%% partitioned table as a table of its own; otherwise the table is one, see
%% {@link group_fragments/1}).
%%
%% Exit codes: 0 done (for `wait-converged': converged), 1 `wait-converged' timed out,
%% 2 bad command line, 3 the node cannot be reached, 4 Hypermnesia does not run there,
%% 5 any other error. The answer (codes 0 and 1) goes to standard output, as JSON with
%% `--json'; the messages of codes 2 to 5 go to standard error.
%%
%% {@link run/1} does the work and returns the exit code and the text; the formatting
%% functions are pure.
-module(hm_ctl).

-export([main/1, run/1, parse/1, format/2, format/3, group_fragments/1, usage/0]).

-define(DEFAULT_WAIT_S, 60).
-define(STATUS_TIMEOUT_MS, 5000).

-type command() :: status | members | tables | wait_converged.
-type opts() :: #{command := command(), node := node(), names := shortnames | longnames,
                  cookie => atom(), timeout_s => non_neg_integer(), json => boolean(),
                  fragments => boolean()}.

%% @doc The escript's entry point: runs, prints, halts with the exit code.
-spec main([string()]) -> no_return().
main(Args) ->
    {Code, Text} = run(Args),
    case Code of
        _ when Code =< 1 -> io:put_chars(Text);
        _ -> io:put_chars(standard_error, Text)
    end,
    halt(Code).

%% @doc Run a command line: `{ExitCode, Text}'.
-spec run([string()]) -> {0..5, iodata()}.
run(Args) ->
    case parse(Args) of
        {ok, Opts} -> connected(Opts);
        {error, Why} -> {2, ["hmctl: ", Why, "\n\n", usage()]}
    end.

%% @doc The usage text.
-spec usage() -> iodata().
usage() ->
    "usage: hmctl (-sname NODE | -name NODE) [-setcookie COOKIE] [--json] [--fragments] "
    "COMMAND\n"
    "commands:\n"
    "  status                      converged or not, members, tables\n"
    "  members                     each member: reachable, links, partitions, last heal\n"
    "  tables                      each EC table and copy: status, rows, lag, digest\n"
    "  wait-converged [--timeout S]  wait until every copy converged (default 60 s)\n"
    "--fragments: each fragment of a partitioned table on its own (else one table)\n"
    "exit codes: 0 ok, 1 not converged in time, 2 usage, 3 node unreachable,\n"
    "            4 Hypermnesia not running there, 5 other error\n".

%% @doc Parse a command line.
-spec parse([string()]) -> {ok, opts()} | {error, iodata()}.
parse(Args) -> parse(Args, #{json => false}).

parse(["-sname", N | Rest], O) -> parse(Rest, O#{node => list_to_atom(N), names => shortnames});
parse(["-name", N | Rest], O) -> parse(Rest, O#{node => list_to_atom(N), names => longnames});
parse(["-setcookie", C | Rest], O) -> parse(Rest, O#{cookie => list_to_atom(C)});
parse(["--json" | Rest], O) -> parse(Rest, O#{json => true});
parse(["--fragments" | Rest], O) -> parse(Rest, O#{fragments => true});
parse(["--timeout", S | Rest], O) ->
    case string:to_integer(S) of
        {N, ""} when N >= 0 -> parse(Rest, O#{timeout_s => N});
        _ -> {error, io_lib:format("--timeout wants seconds, not ~s", [S])}
    end;
parse(["-" ++ _ = Opt | _], _) -> {error, io_lib:format("unknown option ~s", [Opt])};
parse([Cmd | Rest], O) when not is_map_key(command, O) ->
    case command(Cmd) of
        {ok, C} -> parse(Rest, O#{command => C});
        error -> {error, io_lib:format("unknown command ~s", [Cmd])}
    end;
parse([Extra | _], _) -> {error, io_lib:format("unexpected ~s", [Extra])};
parse([], O) ->
    case O of
        #{node := _} when not is_map_key(command, O) -> {error, "no command"};
        #{node := N, names := Names} ->
            case string:split(atom_to_list(N), "@") of
                [_, Host] when Host =/= "" -> {ok, O};
                [Name] when Name =/= "" ->
                    case this_host(Names) of
                        {ok, Host} -> {ok, O#{node := list_to_atom(Name ++ "@" ++ Host)}};
                        error -> {error, io_lib:format("cannot find this host's full name: "
                                                       "give -name ~s@HOST", [Name])}
                    end;
                _ -> {error, io_lib:format("~s is not a node name (name@host)", [N])}
            end;
        _ -> {error, "which node? give -sname NODE or -name NODE"}
    end.

%% The host part `erl' gives a node named without one: the host's name up to its first dot
%% with `-sname', its full name with `-name'.
this_host(Names) ->
    {ok, Here} = inet:gethostname(),
    case {Names, string:split(Here, ".")} of
        {shortnames, [Short | _]} -> {ok, Short};
        {longnames, [_, _]} -> {ok, Here};
        {longnames, [_]} ->
            case inet:gethostbyname(Here) of
                {ok, {hostent, Name, Aliases, _, _, _}} ->
                    case [H || H <- [Name | Aliases], string:find(H, ".") =/= nomatch] of
                        [Full | _] -> {ok, Full};
                        [] -> error
                    end;
                {error, _} -> error
            end
    end.

command("status") -> {ok, status};
command("members") -> {ok, members};
command("tables") -> {ok, tables};
command("wait-converged") -> {ok, wait_converged};
command(_) -> error.

%%% ---------------------------------------------------------------- talking to the node

connected(O = #{node := Node, names := Names}) ->
    [_, Host] = string:split(atom_to_list(Node), "@"),
    Self = list_to_atom("hmctl_" ++ os:getpid() ++ "@" ++ Host),
    case net_kernel:start(Self, #{name_domain => Names, hidden => true}) of
        {ok, _} ->
            _ = [erlang:set_cookie(C) || #{cookie := C} <- [O]],
            case net_kernel:connect_node(Node) of
                true -> execute(O);
                _ -> {3, io_lib:format("hmctl: cannot reach ~s (is it running? is the cookie "
                                       "right?)\n", [Node])}
            end;
        {error, Why} ->
            {3, io_lib:format("hmctl: cannot start distribution as ~s: ~0p (is epmd "
                              "running?)\n", [Self, Why])}
    end.

execute(O = #{command := wait_converged, node := Node}) ->
    S = maps:get(timeout_s, O, ?DEFAULT_WAIT_S),
    case remote(Node, wait_converged, [all, S * 1000], S * 1000 + 2 * ?STATUS_TIMEOUT_MS) of
        {ok, ok} -> {0, answer(O, #{converged => true}, "converged\n")};
        {ok, {error, {timeout, Info}}} ->
            {1, answer(O, Info, ["hmctl: not converged after ", integer_to_list(S), " s\n",
                                 format(status, Info, O)])};
        Other -> failed(Node, Other)
    end;
execute(O = #{command := Cmd, node := Node}) ->
    T = maps:get(timeout_s, O, ?STATUS_TIMEOUT_MS div 1000) * 1000,
    case remote(Node, cluster_info, [all, #{timeout => max(1, T)}], T + ?STATUS_TIMEOUT_MS) of
        {ok, Info = #{converged := _}} -> {0, answer(O, Info, format(Cmd, Info, O))};
        Other -> failed(Node, Other)
    end.

%% With --json the answer as JSON, otherwise the text.
answer(#{json := true}, Term, _Text) -> [hm_json:encode(Term), "\n"];
answer(_, _, Text) -> Text.

remote(Node, F, A, Timeout) ->
    try {ok, erpc:call(Node, hypermnesia, F, A, Timeout)}
    catch error:{erpc, Why} -> {erpc, Why};
          Class:Reason -> {Class, Reason}
    end.

failed(Node, {ok, {error, {node_not_running, _}}}) ->
    {4, io_lib:format("hmctl: Hypermnesia is not running on ~s\n", [Node])};
failed(Node, {error, {exception, undef, _}}) ->
    {4, io_lib:format("hmctl: Hypermnesia is not loaded on ~s\n", [Node])};
failed(Node, {erpc, noconnection}) ->
    {3, io_lib:format("hmctl: lost the connection to ~s\n", [Node])};
failed(Node, {erpc, timeout}) ->
    {5, io_lib:format("hmctl: ~s did not answer in time\n", [Node])};
failed(Node, Other) ->
    {5, io_lib:format("hmctl: ~s: ~0p\n", [Node, Other])}.

%%% ---------------------------------------------------------------- formatting (pure)

%% @doc The text of a command's answer, from a {@link hm_status:cluster_info/2} map, a
%% partitioned table as one table.
-spec format(command(), hm_status:info()) -> iodata().
format(Cmd, Info) -> format(Cmd, Info, #{}).

%% @doc {@link format/2}; with `#{fragments => true}' each fragment of a partitioned table
%% as a table of its own.
-spec format(command(), hm_status:info(), map()) -> iodata().
format(Cmd, Info = #{tables := Ts}, #{fragments := true}) when Cmd =/= members ->
    fmt(Cmd, Info#{tables := maps:map(fun(_, V) -> maps:remove(fragment_of, V) end, Ts)});
format(Cmd, Info = #{tables := Ts}, _) -> fmt(Cmd, Info#{tables := group_fragments(Ts)});
format(Cmd, Info, _) -> fmt(Cmd, Info).

%% @doc The tables of a {@link hm_status:cluster_info/2} map with the fragments of each
%% partitioned table (those with `fragment_of') made one: converged when all are, what each
%% waits for (with its name), and each node's copies summed (rows, lag, buffered and
%% unstable operations; its status the first one not `ready', if any; `fragments': how many
%% it holds).
-spec group_fragments(#{atom() => map()}) -> #{atom() => map()}.
group_fragments(Ts) ->
    Groups = maps:groups_from_list(fun({T, V}) -> maps:get(fragment_of, V, {alone, T}) end,
                                   maps:to_list(Ts)),
    maps:from_list([group(K, Vs) || {K, Vs} <- maps:to_list(Groups)]).

group({alone, T}, [{T, V}]) -> {T, V};
group(Base, Frags) ->
    Copies = maps:groups_from_list(fun({N, _}) -> N end, fun({_, C}) -> C end,
                                   lists:append([maps:to_list(Cs)
                                                 || {_, #{copies := Cs}} <- Frags])),
    {Base, #{converged => lists:all(fun({_, #{converged := C}}) -> C end, Frags),
             pending => [{T, P} || {T, #{pending := Ps}} <- lists:sort(Frags), P <- Ps],
             fragments => length(Frags),
             copies => maps:map(fun(_, Cs) -> sum_copies(Cs) end, Copies)}}.

sum_copies(Cs) ->
    Held = [C || C <- Cs, maps:get(status, C) =/= no_copy],
    Status = case [S || #{status := S} <- Held, S =/= ready] of
                 [] when Held =:= [] -> no_copy;
                 [] -> ready;
                 [S | _] -> S
             end,
    Sums = maps:from_list([{K, lists:sum(Vs)}
                           || K <- [size, lag, buffered_ops, unstable_ops],
                              Vs <- [[V || #{K := V} <- Held, is_integer(V)]], Vs =/= []]),
    Sums#{status => Status, fragments => length(Held)}.

fmt(status, #{converged := C, nodes := Ns, tables := Ts}) ->
    Up = [N || {N, #{status := up}} <- maps:to_list(Ns)],
    [io_lib:format("cluster: ~s\n", [yes_no(C, "converged", "NOT converged")]),
     io_lib:format("members: ~p, ~p reachable\n", [map_size(Ns), length(Up)]),
     [io_lib:format("  ~s ~s\n", [N, node_status(V)]) || {N, V} <- lists:sort(maps:to_list(Ns))],
     io_lib:format("tables: ~p\n", [map_size(Ts)]),
     [io_lib:format("  ~s~s ~s~s\n", [T, fragments(V), yes_no(TC, "converged", "NOT converged"),
                                      pending(P)])
      || {T, V = #{converged := TC, pending := P}} <- lists:sort(maps:to_list(Ts))]];
fmt(members, #{nodes := Ns}) ->
    [io_lib:format("~-28s ~-12s ~-10s ~-8s ~s\n",
                   ["node", "status", "partitions", "rejoins", "links up / last heal"])
     | [io_lib:format("~-28s ~-12s ~-10s ~-8s ~s\n",
                      [N, node_status(V), opt(partitions_seen, V), opt(mnesia_rejoins, V),
                       links(N, V)])
        || {N, V} <- lists:sort(maps:to_list(Ns))]];
fmt(tables, #{tables := Ts}) ->
    [[io_lib:format("~s~s: ~s~s\n", [T, fragments(TV), yes_no(C, "converged", "NOT converged"),
                                       pending(P)]),
      io_lib:format("  ~-28s ~-10s ~8s ~6s ~8s ~8s ~s\n",
                    ["copy", "status", "rows", "lag", "buffered", "unstable", "digest"]),
      [io_lib:format("  ~-28s ~-10s ~8s ~6s ~8s ~8s ~s\n",
                     [N, node_status(V), opt(size, V), opt(lag, V), opt(buffered_ops, V),
                      opt(unstable_ops, V), digest(V)])
       || {N, V} <- lists:sort(maps:to_list(Cs))]]
     || {T, TV = #{converged := C, pending := P, copies := Cs}} <- lists:sort(maps:to_list(Ts))];
fmt(wait_converged, Info) -> fmt(status, Info).

fragments(#{fragments := F}) -> io_lib:format(" (~p fragments)", [F]);
fragments(_) -> "".

yes_no(true, Y, _) -> Y;
yes_no(false, _, N) -> N.

node_status(#{status := S}) when is_atom(S) -> atom_to_list(S);
node_status(#{status := S}) -> io_lib:format("~0p", [S]).

opt(K, M) ->
    case maps:get(K, M, undefined) of
        undefined -> "-";
        V -> io_lib:format("~0p", [V])
    end.

digest(#{digest := <<D:12/binary, _/binary>>}) -> D;
digest(_) -> "-".

pending([]) -> "";
pending(P) -> io_lib:format(" (waiting for: ~0p)", [P]).

links(N, V = #{connected := C}) ->
    [io_lib:format("~0p", [lists:sort(C -- [N])]),
     case maps:get(last_heal, V, undefined) of
         #{table := T, peer := P, duration_ms := D, ops_received := R, ops_sent := S} ->
             io_lib:format(" / ~s with ~s: ~p ms, ~p ops in, ~p out", [T, P, D, R, S]);
         _ -> ""
     end];
links(_, _) -> "-".
