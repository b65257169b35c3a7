%% @doc Partitioned EC tables: a table split into fragments placed on a consistent-hash ring
%% of a pool of nodes, `N' copies each ("RELEASE: Scalable persistent storage for Erlang",
%% "The requirements for scalable and available persistent storage": implicit placement by
%% consistent hashing, peer to peer, no single point of failure, asynchronous replication
%% with automatic reconciliation).
%%
%% Created with Mnesia's own option names:
%% ```
%% hypermnesia:create_table(user, [{type, pawset}, {attributes, [id, name]},
%%                                 {frag_properties, [{n_fragments, 16},
%%                                                    {n_ram_copies, 3},
%%                                                    {node_pool, Nodes}]}])
%% '''
%% Fragment `K' is the EC table `user' (K = 1) or `user_fragK', held by the `N' nodes of its
%% preference list on the ring of the pool ({@link hm_ring}); its copies replicate among
%% themselves exactly as the copies of any EC table do. A key belongs to fragment
%% `erlang:phash2(Key, F) + 1' for ever. Any node of the cluster reads and writes any key
%% under `async_ec': a node without a copy of the key's fragment passes the write to one of
%% its holders and reads from one, and keeps writes as hints when none can be reached
%% ({@link hm_ec_frag}, {@link hm_ec_hints}).
%%
%% {@link change_table_frag/2} with `{add_node, Node}' or `{del_node, Node}' changes the pool:
%% only the fragments whose preference lists change move, by state transfer (the new copy
%% catches up from the others before it counts), while reads and writes go on; a copy is
%% removed only once the others hold every operation it accepted.
%%
%% `{foreign_key, {Parent, Attr}}' in `frag_properties' (Mnesia's option, as its bench
%% program uses it) co-locates related records: the table takes the parent's number of
%% fragments and pool (given ones must be equal), its fragment `K' is held by the nodes of
%% the parent's fragment `K', and a record goes to the fragment its attribute `Attr' hashes
%% to ({@link hm_ec_frag:record_fragment/3}). As in Mnesia, the parent must not have a
%% foreign key itself, a pool change is made on the parent and moves both tables' fragments,
%% and a parent is not deleted while such a table names it. Only `tcsb' replication.
%%
%% Invariants: the copy holders of a fragment are its preference list on the ring of the
%% pool once every move is done; a fragment never has fewer copies during a move than
%% before or after it.
-module(hm_partition).

-export([create_table/2, delete_table/1, owners/2, change_table_frag/2, properties/1,
         forget_node/1]).
-export([caught_up/3, removable/3, removal_target/3, create_table/3, foreign_props/5,
         foreigners/1]).

-define(READY_TIMEOUT_MS, 120000).
-define(DOTTED_OPTS, [replication, anti_entropy, strip_interval, sync_interval]).
-define(CAUGHT_UP_TIMEOUT_MS, 60000).

-type change() :: {add_node, node()} | {del_node, node()}.

%% @doc Create a table; with `frag_properties' and an EC type, a partitioned EC table.
%% `frag_properties' takes `{n_fragments, F}' (default 1), one of `{n_ram_copies, N}' and
%% `{n_disc_copies, N}' (default `{n_ram_copies, 1}') and `{node_pool, Nodes}' (default
%% every db node); the table's copies are placed by the ring, so `ram_copies' and
%% `disc_copies' may not be given too. Errors: `{bad_ec_option, Tab, Option}',
%% `{bad_ec_option, Tab, {type, ordered_set}}' (the order of a table split by key hash would
%% hold within each fragment only), `{not_active, Tab, Node}' (a pool node where Mnesia does
%% not run), `{combine_error, Tab,
%% "Too few nodes in node_pool"}', and those of `hypermnesia:create_table/2'. With
%% `{foreign_key, {Parent, Attr}}' also those of {@link foreign_props/5}. Without an EC
%% type this is `mnesia:create_table/2' (a Mnesia fragmented table), and without
%% `frag_properties' it is {@link hm_ec_registry:create_table/2}.
%%
%% `{replication, tcsb | dotted}' (default `tcsb'): how the copies of each fragment
%% replicate, by the tagged causal stable broadcast as any EC table, or by DottedDB
%% ({@link hm_dotted_server}, with `{anti_entropy, node_clock | merkle}', `{strip_interval,
%% Ms}', `{sync_interval, Ms}'; only `pawset', `ram_copies', siblings). Errors for these:
%% `{bad_ec_option, Tab, Option}', `{not_supported, Tab, {dotted_replication, What}}'.
-spec create_table(atom(), [tuple()]) -> {atomic, ok} | {aborted, term()}.
create_table(Tab, Opts) when is_atom(Tab), is_list(Opts) ->
    %% a malformed list (improper, or an option not a tuple) goes to the registry, which
    %% refuses it whole: checked per option below, it named a fragment, or crashed on `{}'
    case hm_ec_registry:is_options(Opts) of
        true -> create_table_checked(Tab, Opts);
        false -> hm_ec_registry:create_table(Tab, Opts)      % which refuses it
    end;
create_table(Tab, Opts) -> hm_ec_registry:create_table(Tab, Opts).

create_table_checked(Tab, Opts) ->
    EcType = lists:member(hm_ec_registry:ec_type(Opts), [pawset, prwset]),
    case {partitioned(Opts) andalso EcType, replication_opts(Opts)} of
        {false, [{replication, tcsb}]} when EcType ->
            create_table(Tab, [O || O <- Opts, not is_tuple(O) orelse element(1, O) =/= replication]);
        {false, [Bad | _]} -> {aborted, {bad_ec_option, Tab, Bad}};
        _ -> create_table_(Tab, Opts)
    end.

create_table_(Tab, Opts) ->
    case partitioned(Opts) andalso hm_ec_registry:ec_type(Opts) of
        T when T =:= pawset; T =:= prwset ->
            try
                %% key order would hold within each fragment only
                hm_ec_registry:ec_spec(Opts) =/= {ok, T, ordered_set}
                    orelse throw({aborted, {bad_ec_option, Tab, {type, ordered_set}}}),
                parse(Tab, Opts)
            of
                Props -> create_partitioned(Tab, Opts, Props)
            catch throw:{aborted, _} = Aborted -> Aborted
            end;
        _ -> hm_ec_registry:create_table(Tab, Opts)
    end.

%% The replication options given (only partitioned tables take them).
replication_opts(Opts) ->
    [O || O <- Opts, is_tuple(O), tuple_size(O) >= 1,
          lists:member(element(1, O), ?DOTTED_OPTS)].

%% @doc A partitioned EC table (options as for {@link create_table/2}, with
%% `frag_properties') whose fragments all carry `Extra' in their EC options: CRDT tables
%% are made this way ({@link hm_crdt_table}).
-spec create_table(atom(), [tuple()], map()) -> {atomic, ok} | {aborted, term()}.
create_table(Tab, Opts, Extra) when is_atom(Tab), is_list(Opts), is_map(Extra) ->
    try parse(Tab, Opts) of
        #{foreign_key := {Parent, _}} ->
            {aborted, {bad_ec_option, Tab, {frag_properties, {foreign_key, Parent}}}};
        Props -> create_partitioned(Tab, Opts, Props, Extra)
    catch throw:{aborted, _} = Aborted -> Aborted
    end.

%% With a `frag_properties' option (and a proper list: anything else is the registry's to
%% refuse).
partitioned([{frag_properties, _} | _]) -> true;
partitioned([_ | Rest]) -> partitioned(Rest);
partitioned(_) -> false.

parse(Tab, Opts) ->
    FP0 = proplists:get_value(frag_properties, Opts),
    is_list(FP0) orelse throw({aborted, {bad_ec_option, Tab, {frag_properties, FP0}}}),
    [throw({aborted, {bad_ec_option, Tab, O}})
     || O <- Opts, is_tuple(O),
        lists:member(element(1, O), [ram_copies, disc_copies, disc_only_copies])],
    Known = [n_fragments, n_ram_copies, n_disc_copies, node_pool, foreign_key],
    [throw({aborted, {bad_ec_option, Tab, {frag_properties, P}}})
     || P <- FP0, not (is_tuple(P) andalso tuple_size(P) =:= 2
                       andalso lists:member(element(1, P), Known))],
    {FP, Foreign} = case proplists:get_value(foreign_key, FP0) of
                        undefined -> {FP0, #{}};
                        FK ->
                            Attrs = proplists:get_value(attributes, Opts, [key, val]),
                            case foreign_props(Tab, FK, Attrs, FP0, parent_props(FK)) of
                                {ok, FP1, Pos} -> {FP1, #{foreign_key => {element(1, FK), Pos}}};
                                {error, Reason} -> throw({aborted, Reason})
                            end
                    end,
    F = proplists:get_value(n_fragments, FP, 1),
    NR = proplists:get_value(n_ram_copies, FP, 0),
    ND = proplists:get_value(n_disc_copies, FP, 0),
    [throw({aborted, {bad_ec_option, Tab, {frag_properties, {K, V}}}})
     || {K, V} <- [{n_fragments, F}, {n_ram_copies, NR}, {n_disc_copies, ND}],
        not is_integer(V) orelse V < 0 orelse (K =:= n_fragments andalso V < 1)],
    {Storage, N} = case {NR, ND} of
                       {0, 0} -> {ram_copies, 1};
                       {_, 0} -> {ram_copies, NR};
                       {0, _} -> {disc_copies, ND};
                       _ -> throw({aborted, {bad_ec_option, Tab,
                                             {frag_properties, {n_disc_copies, ND}}}})
                   end,
    Pool = proplists:get_value(node_pool, FP, mnesia:system_info(db_nodes)),
    (is_list(Pool) andalso Pool =/= [] andalso lists:all(fun is_atom/1, Pool))
        orelse throw({aborted, {bad_type, Tab, {node_pool, Pool}}}),
    check_active(Tab, Pool),
    length(lists:usort(Pool)) >= N
        orelse throw({aborted, {combine_error, Tab, "Too few nodes in node_pool"}}),
    Repl = replication(Tab, Opts, Storage),
    (Foreign =:= #{} orelse maps:get(replication, Repl) =:= tcsb)
        orelse throw({aborted, {not_supported, Tab, {dotted_replication, foreign_key}}}),
    maps:merge(maps:merge(Repl, Foreign),
               #{n_fragments => F, n_copies => N, storage => Storage, pool => lists:usort(Pool)}).

parent_props({Parent, _}) when is_atom(Parent) -> properties(Parent);
parent_props(_) -> error.

%% @doc The fragmentation properties of a table whose `frag_properties' `FP' name the
%% foreign key `{Parent, Attr}' (`Attrs': the table's attributes; `ParentProps': the
%% parent's partitioning, `error' when it is not a partitioned EC table), pure: `FP' with
%% the parent's `n_fragments', `node_pool' and copies where `FP' gives none, and the
%% position of `Attr' in the record. Mnesia's rules for `foreign_key' (Mnesia User's Guide,
%% "Table Fragmentation"): the parent is another table, itself without a foreign key, and
%% the two have the same number of fragments and the same pool, so that fragment `K' of
%% both has the same preference list (the first `N' nodes of it for `N' copies). Errors:
%% `{bad_ec_option, Tab, {frag_properties, {foreign_key, FK}}}' (no such partitioned EC
%% parent or attribute), `{combine_error, ...}' as Mnesia's.
-spec foreign_props(atom(), term(), [atom()], [{atom(), term()}], {ok, map()} | error) ->
          {ok, [{atom(), term()}], pos_integer()} | {error, term()}.
foreign_props(Tab, FK = {Tab, _}, _Attrs, _FP, _ParentProps) ->
    {error, {combine_error, Tab, FK}};
foreign_props(Tab, FK = {_Parent, _Attr}, _Attrs, _FP, error) ->
    {error, {bad_ec_option, Tab, {frag_properties, {foreign_key, FK}}}};
foreign_props(Tab, FK = {_, _}, _Attrs, _FP, {ok, #{foreign_key := ParentFK}}) ->
    {error, {combine_error, Tab, "Multiple levels of foreign_key dependencies", FK, ParentFK}};
foreign_props(Tab, FK = {Parent, Attr}, Attrs, FP, {ok, PP = #{n_fragments := PF,
                                                              pool := PPool}}) ->
    Pos = case Attr of
              _ when is_integer(Attr), Attr >= 2, Attr =< length(Attrs) + 1 -> Attr;
              _ when is_atom(Attr) ->
                  length(lists:takewhile(fun(A) -> A =/= Attr end, Attrs)) + 2;
              _ -> 0
          end,
    F = proplists:get_value(n_fragments, FP, PF),
    Pool = proplists:get_value(node_pool, FP, PPool),
    Given = [P || P = {K, _} <- FP, K =:= n_ram_copies orelse K =:= n_disc_copies],
    Copies = case {Given, PP} of
                 {[], #{storage := disc_copies, n_copies := N}} -> [{n_disc_copies, N}];
                 {[], #{n_copies := N}} -> [{n_ram_copies, N}];
                 _ -> Given
             end,
    if
        Pos < 2; Pos > length(Attrs) + 1 ->
            {error, {bad_ec_option, Tab, {frag_properties, {foreign_key, FK}}}};
        F =/= PF ->
            {error, {combine_error, Tab, {n_fragments, F}, Parent, {n_fragments, PF}}};
        not is_list(Pool) ->
            {error, {bad_type, Tab, {node_pool, Pool}}};
        true ->
            case lists:usort(Pool) of
                PPool -> {ok, rebuild(FP, F, PPool, Copies), Pos};
                _ -> {error, {combine_error, Tab, {node_pool, Pool}, Parent, {node_pool, PPool}}}
            end
    end;
foreign_props(Tab, FK, _Attrs, _FP, _ParentProps) ->
    {error, {bad_type, Tab, {foreign_key, FK}}}.

rebuild(FP, F, Pool, Copies) ->
    [{n_fragments, F}, {node_pool, Pool} | Copies]
        ++ [P || P = {K, _} <- FP, not lists:member(K, [n_fragments, node_pool, n_ram_copies,
                                                     n_disc_copies, foreign_key])].

%% @doc The partitioned EC tables whose foreign key names `Tab' (Mnesia's "foreigners").
-spec foreigners(atom()) -> [atom()].
foreigners(Tab) ->
    [T || T <- mnesia:system_info(tables),
          {ok, #{foreign_key := {Parent, _}}} <- [properties(T)], Parent =:= Tab].

%% `{replication, tcsb | dotted}' (default `tcsb') and, with `dotted', `{anti_entropy,
%% node_clock | merkle}' (default `node_clock'), `{strip_interval, Ms}' and `{sync_interval,
%% Ms}' (default 1000 each). Dotted fragments are `ram_copies', of type `pawset', and show
%% concurrent writes as siblings.
replication(Tab, Opts, Storage) ->
    Type = hm_ec_registry:ec_type(Opts),
    Conflict = proplists:get_value(conflict, Opts, siblings),
    Intervals = [{K, V} || {K, V} <- Opts, K =:= strip_interval orelse K =:= sync_interval],
    [throw({aborted, {bad_ec_option, Tab, I}})
     || I = {_, V} <- Intervals, not is_integer(V) orelse V < 1],
    case {proplists:get_value(replication, Opts, tcsb),
          proplists:get_value(anti_entropy, Opts, none)} of
        {tcsb, none} when Intervals =:= [] -> #{replication => tcsb};
        {tcsb, none} -> throw({aborted, {bad_ec_option, Tab, hd(Intervals)}});
        {tcsb, AE} -> throw({aborted, {bad_ec_option, Tab, {anti_entropy, AE}}});
        {dotted, AE0} when AE0 =:= none; AE0 =:= node_clock; AE0 =:= merkle ->
            Storage =:= ram_copies
                orelse throw({aborted, {not_supported, Tab, {dotted_replication, n_disc_copies}}}),
            Type =:= pawset
                orelse throw({aborted, {not_supported, Tab, {dotted_replication, Type}}}),
            Conflict =:= siblings
                orelse throw({aborted, {bad_ec_option, Tab, {conflict, Conflict}}}),
            maps:merge(maps:from_list(Intervals),
                       #{replication => dotted,
                         anti_entropy => case AE0 of none -> node_clock; _ -> AE0 end});
        {dotted, AE} -> throw({aborted, {bad_ec_option, Tab, {anti_entropy, AE}}});
        {R, _} -> throw({aborted, {bad_ec_option, Tab, {replication, R}}})
    end.

check_active(Tab, Nodes) ->
    Running = mnesia:system_info(running_db_nodes),
    [throw({aborted, {not_active, Tab, N}}) || N <- Nodes, not lists:member(N, Running)],
    ok.

create_partitioned(Tab, Opts, Props) -> create_partitioned(Tab, Opts, Props, #{}).

create_partitioned(Tab, Opts, Props = #{n_fragments := F, storage := Storage}, Extra0) ->
    Placement = placement(Props),
    %% every fragment holds records named as the table's
    Dropped = [frag_properties, record_name, conflict | ?DOTTED_OPTS],
    Common = [{record_name, proplists:get_value(record_name, Opts, Tab)}
              | [{conflict, siblings} || maps:get(replication, Props) =:= dotted]]
        ++ [O || O <- Opts, not (is_tuple(O) andalso lists:member(element(1, O), Dropped))]
        ++ [O || O = {conflict, _} <- Opts, maps:get(replication, Props) =/= dotted],
    %% a dotted fragment's copies are hm_dotted_server processes
    Server = case Props of
                 #{replication := dotted} ->
                     (maps:with(?DOTTED_OPTS, Props))#{server => hm_dotted_server};
                 _ -> #{}
             end,
    %% the fragments first, `Tab' itself last (it is what makes the table partitioned)
    Create = fun(K, {atomic, ok}) ->
                     Frag = hm_ec_frag:fragment_name(Tab, K),
                     Extra = maps:merge(Extra0, Server#{frag => case K of
                                                                    1 -> Props;
                                                                    _ -> #{base => Tab,
                                                                           number => K}
                                                                end}),
                     case hm_ec_registry:create_table(
                            Frag, [{Storage, maps:get(K, Placement)} | Common], Extra) of
                         {atomic, ok} -> {atomic, ok};
                         {aborted, {already_exists, _}} -> {aborted, {already_exists, Tab}};
                         Aborted -> Aborted
                     end;
                (_, Aborted) -> Aborted
             end,
    Frags = hm_ec_frag:fragment_names(Tab, F),
    case lists:foldl(Create, {atomic, ok}, lists:seq(F, 1, -1)) of
        {atomic, ok} ->
            ok = hm_ec_registry:wait_ready(Frags),
            {atomic, ok};
        Aborted ->
            _ = [hm_ec_registry:delete_table(Fr) || Fr <- Frags,
                                                    hm_ec_registry:is_ec_table(Fr)],
            Aborted
    end.

%% @doc Delete a table; a partitioned one with all its fragments, unless a table's foreign
%% key names it (`{combine_error, Tab, "Too many foreigners", Tables}', as Mnesia).
-spec delete_table(atom()) -> {atomic, ok} | {aborted, term()}.
delete_table(Tab) ->
    case {properties(Tab), foreigners(Tab)} of
        {{ok, _}, [_ | _] = Foreigners} ->
            {aborted, {combine_error, Tab, "Too many foreigners", Foreigners}};
        {{ok, #{n_fragments := F}}, []} ->
            [_ | Others] = hm_ec_frag:fragment_names(Tab, F),
            _ = [on_holder(Fr, [], hm_ec_registry, delete_table, [Fr]) || Fr <- Others,
                                                         hm_ec_registry:is_ec_table(Fr)],
            on_holder(Tab, [], hm_ec_registry, delete_table, [Tab]);
        {error, _} -> hm_ec_registry:delete_table(Tab)
    end.

%% @doc The nodes holding `Key' of `Tab': for a partitioned table the holders of the key's
%% fragment in the order of its preference list (every node gives the same answer), for any
%% other table its copy holders, sorted. `{error, {no_exists, Tab}}' for no such table.
-spec owners(atom(), term()) -> [node()] | {error, {no_exists, atom()}}.
owners(Tab, Key) ->
    case properties(Tab) of
        {ok, Props = #{n_fragments := F}} ->
            K = hm_ec_frag:fragment(Key, F),
            Holders = hm_ec_registry:copy_nodes(hm_ec_frag:fragment_name(Tab, K)),
            Pref = maps:get(K, placement(Props)),
            [N || N <- Pref, lists:member(N, Holders)] ++ lists:sort(Holders -- Pref);
        error ->
            try lists:usort(hm_ec_registry:copy_nodes(Tab))
            catch _:_ -> {error, {no_exists, Tab}}
            end
    end.

%% @doc The partitioning of `Tab' (`#{n_fragments, n_copies, storage, pool}'), or `error'
%% when it is not a partitioned EC table.
-spec properties(atom()) -> {ok, map()} | error.
properties(Tab) ->
    case hm_ec_registry:ec_options(Tab) of
        {ok, #{frag := Props = #{n_fragments := _}}} -> {ok, Props};
        _ -> error
    end.

%% @doc Add a node to the pool of a partitioned table, or remove one: the fragments whose
%% preference lists change move (a new copy is added and catches up by state transfer, then
%% the old one is removed once the others hold every operation it accepted). Every holder of
%% a fragment that moves must be up, but for the node that leaves: Mnesia changes the copies
%% of a table only then. A node that is down leaves as Mnesia lets a copy on a down node go:
%% when its schema is in RAM, its copies are removed first and each fragment it held gets a
%% new copy from the holders that are up (what it had not sent is lost with it: only for a
%% node gone for good); when its schema is on disc, `{del_node, Node}' is refused, and a node
%% gone for good leaves with {@link forget_node/1}. For a Mnesia fragmented table this is
%% `mnesia:change_table_frag/2'. The tables whose foreign key names `Tab' change with it;
%% on such a table itself the change is refused (`{combine_error, Tab, "Op only allowed via
%% foreign table", {foreign_key, FK}}', as Mnesia). Errors: `{not_active, Tab, Node}' (adding a node
%% where Mnesia does not run, or removing one that is down with its schema on disc),
%% `{already_exists, Tab, Node}', `{no_exists, Tab, Node}', `{combine_error, Tab, "Too few
%% nodes in node_pool"}', `{not_ready, Fragment, Node}' (a new copy that did not catch up in
%% 2 minutes: the old copies are kept, and the change can be made again).
-spec change_table_frag(atom(), change() | term()) -> {atomic, ok} | {aborted, term()}.
change_table_frag(Tab, Change) ->
    case {properties(Tab), Change} of
        {error, _} ->
            case hm_ec_registry:is_ec_table(Tab) of
                true -> {aborted, {not_partitioned, Tab}};
                false -> mnesia:change_table_frag(Tab, Change)
            end;
        {{ok, #{foreign_key := FK}}, _} ->
            {aborted, {combine_error, Tab, "Op only allowed via foreign table", {foreign_key, FK}}};
        {{ok, Props}, {add_node, Node}} when is_atom(Node) ->
            try
                check_active(Tab, [Node]),
                lists:member(Node, maps:get(pool, Props))
                    andalso throw({aborted, {already_exists, Tab, Node}}),
                repartition(Tab, Props, lists:usort([Node | maps:get(pool, Props)]))
            catch throw:{aborted, _} = Aborted -> Aborted
            end;
        {{ok, Props = #{pool := Pool}}, {del_node, Node}} when is_atom(Node) ->
            case {lists:member(Node, Pool), Pool -- [Node], is_up(Node)} of
                {false, _, _} -> {aborted, {no_exists, Tab, Node}};
                {true, [], _} ->
                    {aborted, {combine_error, Tab, "Too few nodes in node_pool"}};
                {true, Rest, false} ->
                    %% a node that is down leaves as Mnesia lets its copies go: only when
                    %% its schema is in RAM (one on disc would list them again at its start)
                    case lists:member(Node, mnesia:table_info(schema, disc_copies)) of
                        true -> {aborted, {not_active, Tab, Node}};
                        false -> repartition(Tab, Props, Rest)
                    end;
                {true, Rest, true} -> repartition(Tab, Props, Rest)
            end;
        {{ok, _}, _} -> {aborted, {bad_ec_option, Tab, Change}}
    end.

%% @doc Remove `Node', a node that is gone for good, from the cluster while it is down:
%% Mnesia's schema copy on it, and with it every table copy it held
%% (`mnesia:del_table_copy(schema, Node)', which Mnesia allows only while the node does not
%% run), so that every EC table it held a copy of stops waiting for it (stability resumes);
%% then its place in the pool of every partitioned EC table: each fragment it held gets a new
%% copy on another node of the pool, from the copies that are up. What it had not sent to
%% another copy before it went is lost with it. To come back it must join as a new node (its
%% Mnesia directory deleted). Errors: Mnesia's (`{active, _, Node}' while it runs, ...),
%% `{combine_error, Tab, "Too few nodes in node_pool"}' (it was the last node of a pool),
%% and those of the moves ({@link change_table_frag/2}).
-spec forget_node(node()) -> {atomic, ok} | {aborted, term()}.
forget_node(Node) when is_atom(Node) ->
    Pools = [{T, P} || T <- mnesia:system_info(tables),
                       {ok, P = #{pool := Pool}} <- [properties(T)],
                       lists:member(Node, Pool), not is_map_key(foreign_key, P)],
    %% Mnesia write-locks every table it held a copy of: the local_content ones (EC tables
    %% and their helpers) need a lock target here
    Local = [T || T <- mnesia:system_info(tables), T =/= schema,
                  mnesia:table_info(T, local_content),
                  lists:member(Node, mnesia:table_info(T, all_nodes))],
    case hm_ec_mnesia:with_lock_targets(Local,
                                        fun() -> mnesia:del_table_copy(schema, Node) end) of
        {atomic, ok} ->
            lists:foldl(fun({T, P = #{pool := Pool}}, {atomic, ok}) ->
                                case Pool -- [Node] of
                                    [] -> {aborted, {combine_error, T,
                                                     "Too few nodes in node_pool"}};
                                    Rest -> repartition(T, P, Rest)
                                end;
                           (_, Aborted) -> Aborted
                        end, {atomic, ok}, Pools);
        Aborted -> Aborted
    end;
forget_node(Node) -> {aborted, {badarg, Node}}.

%% The table's fragments move, then those of the tables whose foreign key names it (Mnesia
%% changes their pools together), so that fragment `K' of each is held where the parent's is.
repartition(Tab, Props, NewPool) ->
    lists:foldl(fun(T, {atomic, ok}) ->
                        {ok, TProps} = properties(T),
                        repartition_one(T, TProps, NewPool);
                   (_, Aborted) -> Aborted
                end, repartition_one(Tab, Props, NewPool), foreigners(Tab)).

repartition_one(Tab, Props = #{n_fragments := F, storage := Storage}, NewPool) ->
    New = Props#{pool := NewPool},
    Moves = hm_ring:moves(placement(Props), placement(New)),
    try
        lists:foreach(fun(Move) -> move(Tab, F, Storage, Move) end, Moves),
        {ok, Opts} = hm_ec_registry:ec_options(Tab),
        {atomic, ok} = on_holder(Tab, [], mnesia, write_table_property,
                                 [Tab, {hm_ec, Opts#{frag := New}}]),
        {atomic, ok}
    catch throw:{aborted, _} = Aborted -> Aborted
    end.

%% One fragment's move, as {@link hm_frag_move:plan/3} plans it from the fragment's holders
%% now: copies on nodes that are down go first (Mnesia adds no copy of a table one of whose
%% holders it cannot reach), then the new copies, ready, then the old copies that are up,
%% once the others hold what they accepted.
move(Tab, _F, Storage, {K, _, _} = Move) ->
    Frag = hm_ec_frag:fragment_name(Tab, K),
    #{drop := Down, add := Add, hand_over := Up} =
        hm_frag_move:plan(hm_ec_registry:copy_nodes(Frag), Move, fun is_up/1),
    lists:foreach(fun(Node) -> del_copy(Frag, Node) end, Down),
    lists:foreach(fun(Node) ->
                          case on_holder(Frag, [Node], hm_ec_registry, add_copy, [Frag, Node, Storage]) of
                              {atomic, ok} -> ok;
                              {aborted, {already_exists, _, _}} -> ok;
                              Aborted -> failed(Frag, add_copy, Node, Aborted)
                          end,
                          wait_until(fun() -> copy_ready(Node, Frag) end, ?READY_TIMEOUT_MS)
                              orelse throw({aborted, {not_ready, Frag, Node}})
                  end, Add),
    lists:foreach(fun(Node) ->
                          %% what the copy held when its removal began, and what it
                          %% originates until then (removal_target/3)
                          Held = case copy_info(Node, Frag) of
                                     #{delivered := D} -> D;
                                     _ -> #{}
                                 end,
                          _ = wait_until(fun() -> handed_over(Frag, Node, Held) end,
                                         ?CAUGHT_UP_TIMEOUT_MS),
                          del_copy(Frag, Node)
                  end, Up).

del_copy(Frag, Node) ->
    case on_holder(Frag, [Node], hm_ec_registry, del_copy, [Frag, Node]) of
        {atomic, ok} -> ok;
        Aborted -> failed(Frag, del_copy, Node, Aborted)
    end.

-spec failed(atom(), add_copy | del_copy, node(), {aborted, term()}) -> no_return().
failed(Frag, Step, Node, Aborted) ->
    logger:notice("hypermnesia: moving ~p: ~p on ~p failed: ~0p", [Frag, Step, Node, Aborted],
                  #{domain => [hypermnesia]}),
    throw(Aborted).

%% A change to the copies of a fragment runs on a node that holds one and is not leaving
%% (Mnesia locks a table where it is held: a node without a copy of a local table cannot).
on_holder(Frag, Leaving, M, F, A) ->
    Holders = hm_ec_registry:copy_nodes(Frag) -- Leaving,
    case lists:member(node(), Holders) orelse [H || H <- Holders, is_up(H)] of
        [H | _] ->
            try erpc:call(H, M, F, A, ?READY_TIMEOUT_MS)
            catch Class:Reason -> {aborted, {Class, Reason}}
            end;
        _ -> apply(M, F, A)                % here, or no holder up: Mnesia answers
    end.

placement(#{pool := Pool, n_fragments := F, n_copies := N}) ->
    hm_ring:placement(hm_ring:new(Pool), F, N).

is_up(Node) -> Node =:= node() orelse lists:member(Node, nodes()).

copy_info(Node, Frag) ->
    try gen_server:call({hm_ec_server, Node}, {info, Frag}, 5000) of
        I = #{} -> I;
        _ -> undefined
    catch exit:_ -> undefined
    end.

copy_ready(Node, Frag) ->
    case copy_info(Node, Frag) of
        #{status := ready} -> true;
        _ -> false
    end.

%% Every other reachable holder has delivered what `Node' must hand over (removal_target/3).
handed_over(Frag, Node, Held) ->
    case copy_info(Node, Frag) of
        Info = #{delivered := Mine} ->
            Others = [case copy_info(H, Frag) of
                          #{delivered := D} -> D;
                          _ -> undefined
                      end || H <- hm_ec_registry:copy_nodes(Frag), H =/= Node, is_up(H)],
            not lists:member(undefined, Others) andalso
                removable(Node, Info#{delivered := removal_target(Node, Held, Mine)}, Others);
        _ -> true                       % no copy there any more: nothing to wait for
    end.

%% @doc What the other holders must have delivered before the copy on `Node' is removed:
%% everything it had delivered when its removal began (`Held'), and every operation it
%% originated since (from `Mine', what it has delivered now). An operation it delivered
%% later from another origin was sent to it by a copy that is still there (a crashed
%% holder sends nothing more), so that copy hands it to the others; waiting for it too
%% would chase a target that moves with every write under load.
-spec removal_target(node(), hm_vv:vv(), hm_vv:vv()) -> hm_vv:vv().
removal_target(Node, Held, Mine) ->
    maps:fold(fun(R = {N, _}, C, Acc) when N =:= Node -> Acc#{R => max(C, maps:get(R, Acc, 0))};
                 (_, _, Acc) -> Acc
              end, Held, Mine).

%% @doc Whether the copy on `Node', whose status is `Info' ({@link hm_ec_table:info/2}),
%% may be removed: it holds no update it took and has not sent yet (a state or delta CRDT
%% table's epoch batch), and it is {@link caught_up/3} with the other holders' delivered
%% vectors `Others'.
-spec removable(node(), #{delivered := hm_vv:vv(), unsent_updates => non_neg_integer(),
                          atom() => term()}, [hm_vv:vv()]) -> boolean().
removable(Node, Info = #{delivered := Mine}, Others) ->
    maps:get(unsent_updates, Info, 0) =:= 0 andalso caught_up(Node, Mine, Others).

%% @doc Whether a copy on `Node' that has delivered `Mine' may be removed: every vector of
%% `Others' (what the other holders delivered) holds every operation `Node' delivered. Not
%% only those it originated: an operation of a holder that crashed (a gone incarnation) may
%% survive on this copy alone, and only this copy would ever resend it.
-spec caught_up(node(), hm_vv:vv(), [hm_vv:vv()]) -> boolean().
caught_up(_Node, Mine, Others) ->
    lists:all(fun(D) -> hm_vv:leq(Mine, D) end, Others).

wait_until(Cond, Timeout) ->
    Deadline = erlang:monotonic_time(millisecond) + Timeout,
    wait_until_(Cond, Deadline).

wait_until_(Cond, Deadline) ->
    case Cond() of
        true -> true;
        false ->
            case erlang:monotonic_time(millisecond) < Deadline of
                true -> timer:sleep(50), wait_until_(Cond, Deadline);
                false -> false
            end
    end.
