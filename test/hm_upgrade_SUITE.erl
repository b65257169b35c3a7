%% @doc A cluster in the middle of a rolling upgrade: nodes 1 and 2 run this build, node 3 the
%% previous commit of the main branch (`HM_PREVIOUS_REV' names another git revision), built
%% by the suite into `_build/previous/<commit>' (once; later runs reuse it) from
%% `git archive' with rebar3. EC tables created on either release replicate between them
%% through writes on every node, a partition with writes on both sides, and its heal; each
%% new node learned the old node's wire versions and sends at one it reads.
%%
%% Skipped where the checkout has no git history (a copy without `.git', as in the OTP
%% 27/29 chroots) or the revision does not exist, or rebar3 is not in the `PATH'.
-module(hm_upgrade_SUITE).
-include_lib("common_test/include/ct.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1]).
-export([old_and_new_nodes_replicate/1]).
-export([rows/1]).

suite() -> [{timetrap, {minutes, 8}}].

all() -> [old_and_new_nodes_replicate].

init_per_suite(Config) ->
    Root = root(),
    Rev = os:getenv("HM_PREVIOUS_REV", "main~1"),
    case previous_build(Root, Rev) of
        {ok, Hash, Ebin} ->
            ct:pal("node 3 runs ~s (~s), from ~s", [Rev, Hash, Ebin]),
            C = hm_cluster:start(#{nodes => 3, dir => ?config(priv_dir, Config),
                                   prefix => "upg", modules => [?MODULE],
                                   ebin => fun(3) -> Ebin; (_) -> default end,
                                   log_filter => {netsplit,
                                                  {fun hm_cluster:netsplit_filter/2, []}}}),
            [{cluster, C}, {previous, Ebin} | Config];
        {skip, _} = Skip -> Skip
    end.

end_per_suite(Config) -> hm_cluster:stop(?config(cluster, Config)).

%%% ------------------------------------------------------------- the case

old_and_new_nodes_replicate(Config) ->
    C = ?config(cluster, Config),
    %% node 3 really runs the other build
    Old = ?config(previous, Config),
    Old = filename:dirname(hm_cluster:call(C, 3, code, which, [hypermnesia])),
    Nodes = hm_cluster:nodes(C),
    %% one table created on a new node, one on the old node (`{type, pawset}': the form
    %% both releases take)
    {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                   [by_new, [{type, pawset}, {attributes, [k, v]},
                                             {ram_copies, Nodes}]]),
    {atomic, ok} = hm_cluster:call(C, 3, hypermnesia, create_table,
                                   [by_old, [{type, pawset}, {attributes, [k, v]},
                                             {ram_copies, Nodes}]]),
    Tabs = [by_new, by_old],
    [ok = hm_cluster:call(C, I, mnesia, wait_for_tables, [Tabs, 30000]) || I <- [1, 2, 3]],
    [write(C, I, Tab, before) || I <- [1, 2, 3], Tab <- Tabs],
    converged(C, Tabs, [before]),
    ok = hm_cluster:cut(C, [3], [1, 2]),
    [write(C, I, Tab, cut) || I <- [1, 2, 3], Tab <- Tabs],
    ok = hm_cluster:heal(C),
    converged(C, Tabs, [before, cut]),
    %% the new nodes asked the old one which wire versions it reads (again once it is back)
    N3 = hm_cluster:node(C, 3),
    ok = hm_cluster:wait_until(
           fun() -> [[{N3, {_, _}}] = [E || E = {N, _} <- hm_cluster:call(C, I, hm_ec_versions,
                                                                          known, []),
                                            N =:= N3]
                     || I <- [1, 2]],
                    true
           end, 10000),
    {comment, "EC tables replicate between this build and the previous one, through a cut"}.

write(C, I, Tab, Tag) ->
    ok = hm_cluster:call(C, I, hypermnesia, async_ec,
                         [fun() -> [ok = mnesia:write({Tab, {Tag, I, K}, K})
                                    || K <- lists:seq(1, 20)],
                                   ok
                          end, []]).

%% Every node shows, in every table, the rows every node wrote with these tags.
converged(C, Tabs, Tags) ->
    Expected = lists:sort([{Tag, I, K} || Tag <- Tags, I <- [1, 2, 3], K <- lists:seq(1, 20)]),
    ok = hm_cluster:wait_until(
           fun() ->
                   Seen = [{I, Tab, hm_cluster:call(C, I, ?MODULE, rows, [Tab])}
                           || I <- [1, 2, 3], Tab <- Tabs],
                   lists:all(fun({_, _, R}) -> R =:= Expected end, Seen)
                       orelse [{I, Tab, length(R)} || {I, Tab, R} <- Seen]
           end, 60000).

%% On a node: the keys of `Tab' it shows, sorted.
rows(Tab) ->
    lists:sort([K || {_, K, _} <- hypermnesia:async_ec(
                                    fun() -> mnesia:select(Tab, [{'_', [], ['$_']}]) end)]).

%%% ------------------------------------------------------------- the previous build

%% The project's directory (this suite's source is in its test/).
root() ->
    Src = proplists:get_value(source, ?MODULE:module_info(compile)),
    filename:dirname(filename:dirname(Src)).

%% Revision `Rev' built into `_build/previous/<commit>': `{ok, Commit, EbinDir}'.
previous_build(Root, Rev) ->
    case {os:find_executable("git"), os:find_executable("rebar3")} of
        {false, _} -> {skip, "git is not installed"};
        {_, false} -> {skip, "rebar3 is not in the PATH"};
        {_, _} ->
            case cmd(Root, "git", ["rev-parse", "--verify", "--quiet", Rev ++ "^{commit}"]) of
                {0, Out} -> build(Root, string:trim(Out));
                _ -> {skip, "no git revision " ++ Rev ++ " here (HM_PREVIOUS_REV names one)"}
            end
    end.

build(Root, Hash) ->
    Dir = filename:join([Root, "_build", "previous", Hash]),
    Ebin = filename:join([Dir, "_build", "default", "lib", "hypermnesia", "ebin"]),
    case filelib:is_regular(filename:join(Ebin, "hypermnesia.app")) of
        true -> {ok, Hash, Ebin};
        false ->
            ok = filelib:ensure_dir(filename:join(Dir, "x")),
            Tar = filename:join(Dir, "src.tar"),
            {0, _} = cmd(Root, "git", ["archive", "--output", Tar, Hash]),
            {0, _} = cmd(Dir, "tar", ["-xf", Tar]),
            case cmd(Dir, "rebar3", ["compile"]) of
                {0, _} -> {ok, Hash, Ebin};
                {Code, Out} -> error({previous_build_failed, Hash, Code, Out})
            end
    end.

cmd(Dir, Prog, Args) ->
    Port = open_port({spawn_executable, os:find_executable(Prog)},
                     [{args, Args}, {cd, Dir}, exit_status, stderr_to_stdout, binary]),
    cmd_result(Port, <<>>).

cmd_result(Port, Out) ->
    receive
        {Port, {data, D}} -> cmd_result(Port, <<Out/binary, D/binary>>);
        {Port, {exit_status, Code}} -> {Code, binary_to_list(Out)}
    end.
