%% @doc This node's metrics in Prometheus' text exposition format (version 0.0.4), served as
%% `GET /metrics' by the status page ({@link hm_http}) behind its token.
%%
%% Every metric is prefixed `hypermnesia_' and labelled `node="..."' (this node); table
%% metrics carry `table="..."' too, and those about another copy `member="..."'. Counters end
%% in `_total'. What is scraped:
%% <ul>
%% <li>per node: `members', `members_reachable', `partitions_seen_total',
%% `mnesia_rejoins_total', `hints' (writes kept for tables none of whose holders is
%% reachable);</li>
%% <li>per table, this node's copy ({@link hypermnesia:info/0}): `table_ready' (1 once caught
%% up), `table_rows', `table_unstable_ops', `table_unstable_keys', `table_given_up_keys',
%% `table_buffered_ops', `table_metadata_bytes', `table_sync_waiting', `table_conflicts_total',
%% `table_duplicates_total', `table_state_catch_ups_total';</li>
%% <li>per table, as this node sees the cluster ({@link hm_status:cluster_info/2}, every member
%% asked, 2 s at most): `table_converged' (1 when every copy has delivered the same and shows
%% the same rows), and per member `table_lag' (operations that copy lacks of the most any copy
%% delivered; absent for a member that did not answer) and `table_member_up' (1 when it
%% answered).</li>
%% </ul>
%% {@link render/3} is the pure part.
-module(hm_metrics).

-export([scrape/0, render/3]).

-define(CLUSTER_TIMEOUT_MS, 2000).

%% {Name, Type, Help}
-define(NODE_METRICS,
        [{members, gauge, "Members of this node's Mnesia cluster."},
         {members_reachable, gauge, "Members this node is connected to, itself included."},
         {partitions_seen_total, counter, "Partitions this node has seen since it started."},
         {mnesia_rejoins_total, counter, "Times this node joined Mnesia again after a partition."},
         {hints, gauge, "Writes kept here for tables none of whose holders is reachable."}]).
-define(TABLE_METRICS,
        [{table_ready, gauge, "1 once this node's copy has caught up (0 while syncing)."},
         {table_rows, gauge, "Rows this node's copy shows."},
         {table_unstable_ops, gauge, "Operations kept until every member has them."},
         {table_unstable_keys, gauge, "Keys with metadata (operations not stable yet)."},
         {table_given_up_keys, gauge, "Keys of operations the log let go before every member "
                                      "had them (past its bound)."},
         {table_buffered_ops, gauge, "Operations received, waiting for their causes."},
         {table_metadata_bytes, gauge, "Memory of the copy's metadata, in bytes."},
         {table_sync_waiting, gauge, "sync_ec writes waiting for the other copies."},
         {table_conflicts_total, counter, "Operations that met a concurrent one on their key."},
         {table_duplicates_total, counter, "Operations received again after they were applied."},
         {table_state_catch_ups_total, counter, "Times this copy caught up by a member's state."},
         {table_converged, gauge, "1 when every copy has delivered the same and shows the same "
                                  "rows, as this node sees them."},
         {table_member_up, gauge, "1 when the member's copy answered this node."},
         {table_lag, gauge, "Operations the member's copy lacks of the most any copy has."}]).

%% @doc This node's metrics, for a scrape.
-spec scrape() -> iodata().
scrape() ->
    Local = case hypermnesia:info() of
                #{} = I -> I;
                {error, _} -> #{}
            end,
    Cluster = case hm_status:cluster_info(all, #{timeout => ?CLUSTER_TIMEOUT_MS}) of
                  #{} = C -> C;
                  {error, _} -> #{}
              end,
    render(node(), Local, Cluster).

%% @doc The metrics of node `Node' from its own report `Local' (what
%% {@link hypermnesia:info/0} returns) and its view of the cluster `Cluster' (what
%% {@link hm_status:cluster_info/2} returns); either may be `#{}' when it could not be had.
-spec render(node(), map(), map()) -> iodata().
render(Node, Local, Cluster) ->
    Base = [{"node", Node}],
    M = maps:get(membership, Local, #{}),
    NodeSamples =
        #{members => [{Base, length(maps:get(members, M, []))} || is_map_key(members, M)],
          members_reachable => [{Base, length(maps:get(connected, M, []))}
                                || is_map_key(connected, M)],
          partitions_seen_total => [{Base, V} || #{partitions_seen := V} <- [M]],
          mnesia_rejoins_total => [{Base, V} || #{mnesia_rejoins := V} <- [M]],
          hints => [{Base, V} || #{hints := V} <- [Local], is_integer(V)]},
    Tabs = lists:sort(maps:to_list(maps:get(tables, Local, #{}))),
    Views = maps:get(tables, Cluster, #{}),
    TabSamples = table_samples(Base, Tabs, Views),
    Samples = maps:merge(NodeSamples, TabSamples),
    [family(Name, Type, Help, maps:get(Name, Samples, []))
     || {Name, Type, Help} <- ?NODE_METRICS ++ ?TABLE_METRICS].

table_samples(Base, Tabs, Views) ->
    Own = [{Name, {[{"table", T} | Base], V}}
           || {T, I} <- Tabs, {Name, V} <- own(I)],
    Seen = [{Name, Sample}
            || {T, View} <- lists:sort(maps:to_list(Views)), {Name, Sample} <- seen(T, View, Base)],
    lists:foldl(fun({Name, S}, Acc) -> Acc#{Name => maps:get(Name, Acc, []) ++ [S]} end,
                #{}, Own ++ Seen).

%% This node's copy of a table: the samples its report gives.
own(I) ->
    [{table_ready, case maps:get(status, I, undefined) of ready -> 1; _ -> 0 end}
     || is_map_key(status, I)]
        ++ [{Name, V} || {Name, Key} <- [{table_rows, size},
                                         {table_unstable_ops, unstable_ops},
                                         {table_unstable_keys, unstable_keys},
                                         {table_given_up_keys, given_up_keys},
                                         {table_buffered_ops, buffered_ops},
                                         {table_sync_waiting, sync_waiting},
                                         {table_conflicts_total, conflicts},
                                         {table_duplicates_total, duplicates},
                                         {table_state_catch_ups_total, state_catch_ups}],
                         V <- [maps:get(Key, I, undefined)], is_integer(V)]
        ++ [{table_metadata_bytes, W * erlang:system_info(wordsize)}
            || W <- [maps:get(metadata_words, I, undefined)], is_integer(W)].

%% A table as this node sees the cluster: convergence, and each member's copy.
seen(T, View, Base) ->
    Labels = [{"table", T} | Base],
    [{table_converged, {Labels, bool(C)}} || #{converged := C} <- [View]]
        ++ lists:append(
             [[{table_member_up, {[{"member", N} | Labels], bool(is_map_key(lag, Copy))}}]
              ++ [{table_lag, {[{"member", N} | Labels], L}}
                  || #{lag := L} <- [Copy], is_integer(L)]
              || {N, Copy} <- lists:sort(maps:to_list(maps:get(copies, View, #{}))),
                 is_map(Copy)]).

bool(true) -> 1;
bool(_) -> 0.

%% One metric family: its HELP and TYPE lines, then its samples (none: nothing at all).
family(_Name, _Type, _Help, []) -> [];
family(Name, Type, Help, Samples) ->
    Full = ["hypermnesia_", atom_to_list(Name)],
    ["# HELP ", Full, " ", Help, "\n",
     "# TYPE ", Full, " ", atom_to_list(Type), "\n",
     [[Full, labels(Labels), " ", integer_to_list(V), "\n"] || {Labels, V} <- Samples]].

labels(Labels) ->
    ["{", lists:join(",", [[K, "=\"", escape(label_value(V)), "\""]
                            || {K, V} <- lists:sort(Labels)]), "}"].

label_value(V) when is_atom(V) -> atom_to_list(V);
label_value(V) when is_binary(V) -> unicode:characters_to_list(V);
label_value(V) when is_list(V) -> V;
label_value(V) -> io_lib:format("~0p", [V]).

%% The exposition format's escapes in a label value: backslash, double quote, newline.
escape(S) ->
    lists:flatmap(fun($\\) -> "\\\\";
                     ($") -> "\\\"";
                     ($\n) -> "\\n";
                     (Ch) -> [Ch]
                  end, lists:flatten(S)).
