%% @doc A partitioned EC table's status on this node, as one table: what
%% `hypermnesia:info(Tab)' reports. A partitioned table is `F' fragments, each an EC table of
%% its own with its own copy holders (see {@link hm_ec_frag}); a node holds copies of some
%% of them, maybe none. Its status here is the sum of its local fragments' ({@link
%% aggregate/4}, pure): rows, buffered and unstable operations, keys with metadata, ...;
%% `status' `syncing' while any local fragment is, `ready' once all are, and `no_copy' on a
%% node that holds none (a node can read and write the table all the same). The fragments'
%% own statuses come on request (option `fragments'). A table in one piece reports what its
%% copy's process does ({@link hm_ec_server:info/1}).
%%
%% Invariants: the sums are over the local fragments only (another node's copies are
%% {@link hm_status}'s business); a node without a copy answers, never
%% `{error, {not_ec_table, Tab}}', for a table it knows as an EC table.
-module(hm_ec_frag_info).

-export([info/2, aggregate/5, fragment_of/1]).

-type options() :: #{fragments => boolean()}.
-export_type([options/0]).

%% The counters summed over the local fragments.
-define(SUMMED, [size, buffered_ops, unstable_ops, unstable_keys, metadata_words, sync_waiting,
                 unsent_updates, unwritten_keys, conflicts, duplicates, state_catch_ups,
                 partial_states]).

%% @doc `Tab''s status on this node (see the module doc). With `#{fragments => true}' a
%% partitioned table's report has `fragments': each local fragment's own status, by name.
%% Errors: `{error, {not_ec_table, Tab}}' (not an EC table, or a table in one piece without
%% a copy here), `{error, {bad_option, O}}'.
-spec info(atom(), options()) -> map() | {error, term()}.
info(Tab, Opts) when is_map(Opts) ->
    case maps:to_list(maps:without([fragments], Opts)) of
        [O | _] -> {error, {bad_option, O}};
        [] ->
            case {maps:get(fragments, Opts, false), hm_ec_registry:ec_options(Tab)} of
                {F, _} when not is_boolean(F) -> {error, {bad_option, {fragments, F}}};
                {Frags, {ok, EcOpts = #{frag := #{n_fragments := N}}}} when N > 1 ->
                    Local = [{Fr, I} || Fr <- hm_ec_frag:fragments(Tab, EcOpts),
                                        hm_ec_frag:is_local(Fr),
                                        I = #{} <- [hm_ec_server:info(Fr)]],
                    All = hm_ec_frag:fragments(Tab, EcOpts),
                    Holders = lists:usort(lists:append([copy_nodes(Fr) || Fr <- All])),
                    Info = aggregate(Tab, EcOpts, Local, Holders, [node() | nodes()]),
                    case Frags of
                        true -> Info#{fragments => maps:from_list(Local)};
                        false -> Info
                    end;
                _ -> hm_ec_server:info(Tab)
            end
    end;
info(_, Opts) -> {error, {bad_option, Opts}}.

copy_nodes(Frag) ->
    try hm_ec_registry:copy_nodes(Frag)
    catch _:_ -> []
    end.

%% @doc The status of partitioned table `Tab' (EC options `EcOpts') on this node, from its
%% local fragments' statuses `Local' (`[{Fragment, Info}]'), the nodes that hold a copy
%% of some fragment (`Holders') and the nodes reachable from here (`Up', this one
%% included): the counters summed, `status' (`ready', `syncing' or `no_copy'),
%% `n_fragments', `local_fragments', `members' (`Holders') and `reachable' (those of them in
%% `Up').
-spec aggregate(atom(), map(), [{atom(), map()}], [node()], [node()]) -> map().
aggregate(Tab, EcOpts = #{frag := #{n_fragments := N}}, Local, Holders, Up) ->
    Infos = [I || {_, I} <- Local],
    Sums = maps:from_list([{K, lists:sum([maps:get(K, I, 0) || I <- Infos])} || K <- ?SUMMED]),
    Status = case [S || #{status := S} <- Infos] of
                 [] -> no_copy;
                 Ss -> case lists:member(syncing, Ss) of
                           true -> syncing;
                           false -> ready
                       end
             end,
    Crdt = case Infos of
               [#{crdt := C} | _] -> C;
               _ -> maps:get(crdt, EcOpts, none)
           end,
    Sums#{table => Tab, type => maps:get(type, EcOpts, undefined),
          conflict => maps:get(conflict, EcOpts, undefined), crdt => Crdt,
          status => Status, n_fragments => N,
          local_fragments => lists:sort([Fr || {Fr, _} <- Local]),
          members => Holders, reachable => [H || H <- Holders, lists:member(H, Up)]}.

%% @doc The partitioned table `Tab' is a fragment of (its first fragment is named as the
%% table itself), or `none' for a table in one piece and a table this node does not know.
-spec fragment_of(atom()) -> {ok, atom()} | none.
fragment_of(Tab) ->
    case hm_ec_registry:ec_options(Tab) of
        {ok, #{frag := #{base := Base}}} -> {ok, Base};
        {ok, #{frag := #{n_fragments := N}}} when N > 1 -> {ok, Tab};
        _ -> none
    end.
